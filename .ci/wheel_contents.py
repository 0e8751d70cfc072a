"""Check what the built wheel and sdist hold: the package and its metadata, one version."""

from __future__ import annotations

import ast
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(dist: Path) -> None:
    version = ast.literal_eval(
        (ROOT / "reliacal" / "_version.py").read_text().split("__version__ =")[1].strip()
    )
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    outside = [
        n for n in names if not n.startswith(("reliacal/", f"reliacal-{version}.dist-info/"))
    ]
    if outside:
        raise SystemExit(f"{wheel.name} holds files outside the package: {outside[:5]}")
    expected = {str(path.relative_to(ROOT)) for path in (ROOT / "reliacal").rglob("*.py")} | {
        "reliacal/py.typed"
    }
    missing = sorted(expected - set(names))
    if missing:
        raise SystemExit(f"{wheel.name} lacks {missing[:5]}")
    metadata = zipfile.ZipFile(wheel).read(f"reliacal-{version}.dist-info/METADATA").decode()
    if f"\nVersion: {version}\n" not in metadata:
        raise SystemExit(f"{wheel.name}'s METADATA does not say version {version}")
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    if not any(name.endswith("/reliacal/_version.py") for name in members):
        raise SystemExit(f"{sdist.name} lacks reliacal/_version.py")
    print(f"{wheel.name}: {len(names)} files, version {version}; {sdist.name}: {len(members)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
