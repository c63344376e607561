# Python: verify(secret, request.headers, raw_body) is True when the request is signed with secret.
import base64, hashlib, hmac, time

def verify(secret, headers, body, now=None):
    msg_id, ts = headers.get("webhook-id"), headers.get("webhook-timestamp", "")
    now = time.time() if now is None else now
    if not (msg_id and ts.isascii() and ts.isdigit()) or abs(now - int(ts)) > 300:  # 5 minutes
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256)
    want = base64.b64encode(mac.digest())
    return any(entry.startswith("v1,") and hmac.compare_digest(entry[3:].encode(), want)
               for entry in headers.get("webhook-signature", "").split(" "))
