"""Generated protobuf and gRPC stubs of ``fedsched.v1`` (never committed).

Written by ``services.api.codegen`` at install time (``python -m services.api.codegen``) or on first
import of ``services.api.pb``. Only this file and ``.gitignore`` are tracked here.
"""
