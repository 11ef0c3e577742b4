"""`engram-memory policy keygen | sign | verify` as an author runs them: exit codes and the
JSON a pipeline reads (through `cli.main`, which maps errors to exit codes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engram_memory.cli.main import main
from engram_memory.policy.bundle import DEFAULT_BUNDLE_DIR, load_bundle_identity
from engram_memory.policy.signing_keys import SIGNING_KEY_FILE, VERIFICATION_KEY_FILE
from tests.policy.signed_bundles import forge


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cli") / "keys"
    assert main(["policy", "keygen", "--out", str(directory)]) == 0
    return directory


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEFAULT_BUNDLE_DIR, tmp_path / "bundle"))


def _sign(bundle: Path, key_dir: Path, key_id: str = "release") -> int:
    key = str(key_dir / SIGNING_KEY_FILE)
    return main(["policy", "sign", str(bundle), "--signing-key", key, "--key-id", key_id])


def _verify(bundle: Path, key_dir: Path, key_id: str = "release", *extra: str) -> int:
    key = str(key_dir / VERIFICATION_KEY_FILE)
    args = ["policy", "verify", str(bundle), "--verification-key", key, "--key-id", key_id]
    return main([*args, *extra])


def test_sign_then_verify_with_the_key_reports_a_verified_signature(
    bundle: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sign(bundle, key_dir) == 0
    capsys.readouterr()
    assert _verify(bundle, key_dir, "release", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["signature_verified"] is True
    assert result["key_id"] == "release"
    assert result["revision"] == load_bundle_identity(DEFAULT_BUNDLE_DIR).revision


def test_verify_without_a_key_reports_the_signer_but_checks_only_the_lock(
    bundle: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sign(bundle, key_dir) == 0
    capsys.readouterr()
    assert main(["policy", "verify", str(bundle), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["signed"], result["signature_verified"]) == (True, False)


def test_verify_with_a_key_fails_an_unsigned_bundle(bundle: Path, key_dir: Path) -> None:
    assert _verify(bundle, key_dir) == 2


def test_verify_with_a_key_fails_a_tampered_signed_bundle(bundle: Path, key_dir: Path) -> None:
    assert _sign(bundle, key_dir) == 0

    def tamper(files: dict[str, bytes]) -> None:
        files["engram/authz/authz.rego"] += b"\n# tampered\n"

    forge(bundle, tamper)
    assert main(["policy", "verify", str(bundle)]) == 0  # the lock alone is fooled
    assert _verify(bundle, key_dir) == 2


def test_verify_with_the_wrong_key_id_fails(bundle: Path, key_dir: Path) -> None:
    assert _sign(bundle, key_dir) == 0
    assert _verify(bundle, key_dir, "another") == 2


def test_a_key_without_a_key_id_is_refused(bundle: Path, key_dir: Path) -> None:
    key = str(key_dir / VERIFICATION_KEY_FILE)
    assert main(["policy", "verify", str(bundle), "--verification-key", key]) == 2


def test_keygen_never_overwrites_a_key(key_dir: Path) -> None:
    assert main(["policy", "keygen", "--out", str(key_dir)]) == 2


def test_signing_a_missing_bundle_fails_with_exit_2(tmp_path: Path, key_dir: Path) -> None:
    assert _sign(tmp_path / "nothing-here", key_dir) == 2


def test_no_output_line_carries_the_private_key(
    bundle: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sign(bundle, key_dir) == 0
    output = capsys.readouterr()
    secret = (key_dir / SIGNING_KEY_FILE).read_text().splitlines()[1]
    assert secret not in output.out + output.err
