// Node: verify(secret, req.headers, rawBody) is true when the request is signed with secret.
const crypto = require("node:crypto");

function verify(secret, headers, body, now = Date.now()) {
  const id = headers["webhook-id"], ts = headers["webhook-timestamp"] || "";
  if (!id || !/^\d+$/.test(ts) || Math.abs(now / 1000 - Number(ts)) > 300) return false; // 5 min
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const want = crypto.createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest();
  return (headers["webhook-signature"] || "").split(" ").some((entry) => {
    const got = Buffer.from(entry.startsWith("v1,") ? entry.slice(3) : "", "base64");
    return got.length === want.length && crypto.timingSafeEqual(got, want);
  });
}

module.exports = { verify };
