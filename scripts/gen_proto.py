"""Generate the Python code for proto/ into the `buraco` package, or check that it is current.

    python scripts/gen_proto.py           # regenerate buraco/ from proto/
    python scripts/gen_proto.py --check   # exit 1 (and list the files) when buraco/ is stale

The generated package is committed (see README, "Generated code"); nothing in it is edited by
hand. Output: `*_pb2.py` (messages), `*_pb2_grpc.py` (stubs and servicers) and `.pyi` type stubs
for both (mypy-protobuf).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE = "buraco"
HEADER = '"""Generated from proto/ by scripts/gen_proto.py. Do not edit."""\n'


def generate(out: Path) -> None:
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    bindir = Path(sys.executable).parent
    args = [
        "grpc_tools.protoc",
        f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out=quiet:{out}",
        f"--mypy_grpc_out=quiet:{out}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for folder in [out / PACKAGE, *(p for p in (out / PACKAGE).rglob("*") if p.is_dir())]:
        (folder / "__init__.py").write_text(HEADER)
    (out / PACKAGE / "py.typed").write_text("")


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that buraco/ is current")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        fresh, current = out / PACKAGE, ROOT / PACKAGE
        if args.check:
            have = tree(current) if current.exists() else set()
            want = tree(fresh)
            stale = sorted(
                (have ^ want)
                | {f for f in have & want if not filecmp.cmp(fresh / f, current / f, shallow=False)}
            )
            if stale:
                print("generated code is stale; run `make proto` and commit:", file=sys.stderr)
                for name in stale:
                    print(f"  {PACKAGE}/{name}", file=sys.stderr)
                return 1
            print(f"generated code is current ({len(want)} files)")
            return 0
        if current.exists():
            shutil.rmtree(current)
        shutil.copytree(fresh, current)
        print(f"generated {len(tree(current))} files into {PACKAGE}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
