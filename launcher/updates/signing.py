"""Release signatures: ed25519 over a statement of each file's name, size and sha256.

The release workflow holds the private key as a secret (`LAUNCHER_UPDATE_SIGNING_KEY`, the
32-byte seed in base64) and signs every file it puts in the feed; the app carries the public key
its build was given (`build_info.json`'s `update_public_key`, base64) and installs only files whose
signature verifies. A build without a public key (a fork without the secrets, a source checkout)
refuses every update instead of trusting an unsigned one.

What is signed binds the file to its release and to what it is for: `statement(version, name, size,
sha256, purpose=...)`. Signing the version too means a feed cannot offer an older signed file as a
newer release; signing the purpose (`file_purpose(platform, kind)` for an installer, `PACK_PURPOSE`
for an engine pack) means a feed cannot present a signed file as another platform's, another kind
of installation's, or a pack as the app (or the reverse).

What is not signed is the feed as a whole: its notes, its date and which of the release's files it
lists are the feed server's word. A feed can therefore leave files out or change the notes, but can
only offer files the release key signed, each for what it was signed for.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from launcher.core.errors import UpdateError

SIGNING_KEY_ENV = "LAUNCHER_UPDATE_SIGNING_KEY"
"""The release secret: the private key's 32-byte seed, base64."""
PUBLIC_KEY_ENV = "LAUNCHER_UPDATE_PUBLIC_KEY"
"""The release variable the build reads: the public key, base64 (scripts/build-app records it)."""


PACK_PURPOSE = "pack"
"""What an engine pack's signature says it is for."""


def file_purpose(platform: str, kind: str) -> str:
    """What an installer's signature says it is for: "file:linux-x86_64:tar.gz"."""
    return f"file:{platform}:{kind}"


def statement(version: str, name: str, size: int, sha256: str, *, purpose: str) -> bytes:
    """The bytes a release signature covers."""
    return (
        f"launcher release file\nfor {purpose}\nversion {version}\nname {name}\nsize {size}\nsha256 {sha256}\n"
    ).encode()


def _raw(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as err:
        raise UpdateError(f"The {what} is not base64 ({err}).") from err
    if len(raw) != 32:
        raise UpdateError(f"The {what} is {len(raw)} bytes; an ed25519 key is 32.")
    return raw


def private_key(text: str) -> Ed25519PrivateKey:
    """The signing key from its base64 seed."""
    return Ed25519PrivateKey.from_private_bytes(_raw(text, "signing key"))


def public_key(text: str) -> Ed25519PublicKey:
    """The verifying key from its base64 form."""
    return Ed25519PublicKey.from_public_bytes(_raw(text, "update public key"))


def public_text(key: Ed25519PrivateKey) -> str:
    """The base64 public key that goes with a signing key."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def new_key() -> tuple[str, str]:
    """A fresh key pair as (private seed, public key), both base64."""
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return base64.b64encode(seed).decode(), public_text(key)


def sign(key: Ed25519PrivateKey, version: str, name: str, size: int, sha256: str, *, purpose: str) -> str:
    """The base64 signature of one file of a release, for `purpose` (`file_purpose(...)` or `PACK_PURPOSE`)."""
    return base64.b64encode(key.sign(statement(version, name, size, sha256, purpose=purpose))).decode()


def verify(
    public: str | None, signature: str | None, version: str, name: str, size: int, sha256: str, *, purpose: str
) -> None:
    """Raise UpdateError unless `signature` is the release key's over this file for `purpose`; `public`
    None means this build carries no key, and then nothing is trusted."""
    if not public:
        raise UpdateError(
            "This build carries no update key, so it cannot verify updates and installs none; "
            "download the new version from the project's releases page."
        )
    if not signature:
        raise UpdateError(f"{name} in the update feed is not signed; it is refused.")
    try:
        raw = base64.b64decode(signature, validate=True)
        public_key(public).verify(raw, statement(version, name, size, sha256, purpose=purpose))
    except (binascii.Error, ValueError, InvalidSignature) as err:
        raise UpdateError(
            f"The signature of {name} does not verify with this app's update key; it is refused."
        ) from err
