// Verifies Sigstore bundles with a public key, by @sigstore/verify (not this
// project's code): trust material built from the key alone, transparency-log,
// CT-log and timestamp thresholds 0 (offline, key-based, as the bundles are).
// Usage: node scripts/sigstore-verify.mjs MODULES_DIR PUBLIC_KEY.pem BUNDLE.json...
// Exit 0 when every bundle verifies; 1 naming the first that does not.
import { createRequire } from "node:module";
import { createHash, createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";

const [modules, keyFile, ...bundles] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(modules), "x.js"));
const { Verifier, toSignedEntity, toTrustMaterial } = require("@sigstore/verify");
const { bundleFromJSON } = require("@sigstore/bundle");

const publicKey = createPublicKey(readFileSync(keyFile));
const hint = createHash("sha256").update(publicKey.export({ type: "spki", format: "der" })).digest("hex");
const root = {
  mediaType: "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
  tlogs: [], certificateAuthorities: [], ctlogs: [], timestampAuthorities: [],
};
const keys = (h) => {
  if (h !== hint) throw new Error(`no key for hint ${h} (the key's is ${hint})`);
  return { publicKey, validFor: () => true };
};
const verifier = new Verifier(toTrustMaterial(root, keys), {
  tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0,
});
for (const file of bundles) {
  try {
    verifier.verify(toSignedEntity(bundleFromJSON(JSON.parse(readFileSync(file, "utf8")))));
    console.log(`verified ${file}`);
  } catch (e) {
    console.log(`${file}: ${e.message}`);
    process.exit(1);
  }
}
