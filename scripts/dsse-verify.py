"""Verifies DSSE envelopes with a public key, by securesystemslib (not this
project's code). Usage: python dsse-verify.py PUBLIC_KEY.pem ENVELOPE.json...
The envelope may be bare or inside a Sigstore bundle (`dsseEnvelope`).
Exit 0 when every envelope verifies; 1 naming the first that does not."""
import hashlib, json, sys
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

pem = open(sys.argv[1], "rb").read()
crypto = serialization.load_pem_public_key(pem)
der = crypto.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
key = SSlibKey.from_crypto(crypto, keyid=hashlib.sha256(der).hexdigest(), scheme="ecdsa-sha2-nistp256")
for path in sys.argv[2:]:
    doc = json.load(open(path))
    try:
        Envelope.from_dict(doc.get("dsseEnvelope", doc)).verify([key], 1)
    except Exception as e:  # VerificationError, or a malformed envelope
        print(f"{path}: {type(e).__name__}: {e}")
        sys.exit(1)
    print(f"verified {path}")
