"""An independent check of an acode-run attestation with the in-toto project's own libraries
(tests/cli/approval/attest.rs; issue 42): the DSSE envelope is read and its signature verified by
securesystemslib under the key id securesystemslib computes itself for the public key, the
payload type is in-toto's, and every subject's SHA-256 matches the file in the workspace.

    python3 intoto_verify.py ENVELOPE PUBLIC_KEY_FILE WORKSPACE

Prints one JSON line ({"ok": true, ...} or {"ok": false, "error": ...}); exits 0 only when
everything holds.
"""

import hashlib
import json
import os
import sys

from cryptography.hazmat.primitives import serialization
from in_toto.models.metadata import ENVELOPE_PAYLOAD_TYPE, Envelope
from securesystemslib.signer import SSlibKey


def fail(why):
    print(json.dumps({"ok": False, "error": why}))
    sys.exit(1)


def main():
    envelope_path, key_path, workspace = sys.argv[1:4]
    with open(key_path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):
        public = serialization.load_pem_public_key(data)
    else:
        public = serialization.load_ssh_public_key(data)
    key = SSlibKey.from_crypto(public)
    with open(envelope_path) as f:
        envelope = Envelope.from_dict(json.load(f))
    if envelope.payload_type != ENVELOPE_PAYLOAD_TYPE:
        fail(f"payload type {envelope.payload_type}")
    try:
        verified = envelope.verify([key], 1)
    except Exception as e:  # securesystemslib raises VerificationError
        fail(f"signature: {type(e).__name__}: {e}")
    statement = json.loads(envelope.payload)
    if statement.get("_type") != "https://in-toto.io/Statement/v1":
        fail(f"statement type {statement.get('_type')}")
    for subject in statement["subject"]:
        path = os.path.join(workspace, subject["name"])
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != subject["digest"]["sha256"]:
            fail(f"subject {subject['name']}: {digest} != {subject['digest']['sha256']}")
    print(
        json.dumps(
            {
                "ok": True,
                "keyids": sorted(verified.keys()),
                "keyid": key.keyid,
                "subjects": [s["name"] for s in statement["subject"]],
                "predicateType": statement["predicateType"],
            }
        )
    )


main()
