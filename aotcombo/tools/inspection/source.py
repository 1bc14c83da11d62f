"""Finding the package ``aotcombo inspect`` reads: a wheel (read with zipfile), an installed
package (found, not imported), or a folder holding <name>/manifest.json."""

from __future__ import annotations

import importlib.util
import re
import zipfile
from pathlib import Path

from ...errors import InspectError


class _Source:
    """Read access to one package: in a wheel, or in a folder."""

    def __init__(self, kind: str, where: str, read, size):
        self.kind, self.where, self.read, self.size = kind, where, read, size


def locate(target: str | Path) -> _Source:
    path = Path(target)
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise InspectError(f"{path} is not a wheel (not a zip file)",
                               fix="pass a .whl built by aotcombo, a folder, or an installed package's name")
        return _from_wheel(path)
    if path.is_dir():
        return _from_folder(path)
    if isinstance(target, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", target):
        try:
            spec = importlib.util.find_spec(target)  # finds; does not import the package
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations)))
            if (folder / "manifest.json").is_file():
                source = _from_folder(folder)
                source.kind = "installed package"
                return source
            raise InspectError(
                f"the installed package {target} ({folder}) is not an aotcombo package (no manifest.json)",
                fix="pass the name of a package built by aotcombo",
            )
    raise InspectError(
        f"no wheel, folder or installed package named {target}",
        fix="pass the path of a .whl, a folder holding <name>/manifest.json, "
        "or the import name of an installed package",
    )


def _from_wheel(path: Path) -> _Source:
    try:
        zf = zipfile.ZipFile(path)
        names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise InspectError(f"cannot read the wheel {path}: {exc}", fix="rebuild it") from exc
    manifests = sorted(n for n in names if n.count("/") == 1 and n.endswith("/manifest.json"))
    if not manifests:
        raise InspectError(f"{path} holds no <package>/manifest.json: it was not built by aotcombo",
                           fix="pass a wheel built by aotcombo build")
    prefix = manifests[0][: -len("manifest.json")]
    infos = {i.filename: i for i in zf.infolist()}

    def read(rel: str) -> bytes:
        try:
            return zf.read(prefix + rel)
        except KeyError:
            raise FileNotFoundError(rel) from None

    def size(rel: str) -> int | None:
        info = infos.get(prefix + rel)
        return info.file_size if info else None

    return _Source("wheel", str(path), read, size)


def _from_folder(folder: Path) -> _Source:
    if not (folder / "manifest.json").is_file():
        inside = sorted(p.parent for p in folder.glob("*/manifest.json"))
        if len(inside) != 1:
            what = "no" if not inside else f"{len(inside)}"
            raise InspectError(
                f"{folder} holds {what} aotcombo package(s) (looked for manifest.json and */manifest.json)",
                fix="pass the package's own folder",
            )
        folder = inside[0]

    def read(rel: str) -> bytes:
        return (folder / rel).read_bytes()

    def size(rel: str) -> int | None:
        p = folder / rel
        return p.stat().st_size if p.is_file() else None

    return _Source("folder", str(folder), read, size)
