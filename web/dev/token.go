package dev

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// devToken is HOOKLANE_API_TOKEN when set, else the token DataDir/token
// keeps from an earlier run, else a new one written there (mode 0600): a
// second run keeps the console tabs and export links of the first working.
// Fresh replaces it.
func devToken(o Options) (string, error) {
	if t := o.Getenv("HOOKLANE_API_TOKEN"); t != "" {
		return t, nil
	}
	path := filepath.Join(o.DataDir, "token")
	if !o.Fresh {
		b, err := os.ReadFile(path)
		if t := strings.TrimSpace(string(b)); err == nil && t != "" {
			return t, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("dev token: %w", err)
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	t := "dev-" + hex.EncodeToString(b[:])
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev token: %w", err)
	}
	return t, nil
}
