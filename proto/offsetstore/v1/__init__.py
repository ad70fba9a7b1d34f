"""Generated gRPC code for offsetstore.v1; produced by scripts/gen_proto.py."""
