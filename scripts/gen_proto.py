"""Regenerates the Python code beside proto/offsetstore/v1/*.proto (or into --out)."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata, resources
from pathlib import Path

from grpc_tools import protoc

# The generated code is committed; one pinned generator keeps it reproducible.
GRPCIO_TOOLS_VERSION = "1.85.1"
ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"


def generate(out: Path) -> None:
    installed = metadata.version("grpcio-tools")
    if installed != GRPCIO_TOOLS_VERSION:
        sys.exit(f"grpcio-tools {GRPCIO_TOOLS_VERSION} is required, {installed} is installed")
    well_known = resources.files("grpc_tools") / "_proto"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=PROTO_ROOT, help="output root")
    generate(parser.parse_args().out)


if __name__ == "__main__":
    main()
