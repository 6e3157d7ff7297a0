"""python -m attnsuite export-onnx ...: the Python subcommands of the attnsuite CLI (the CLI's
own `attnsuite export-onnx` runs this). The other subcommands are the C++ CLI's: `attnsuite`."""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "export-onnx":
        from .onnx import main as export_onnx

        return export_onnx(argv[1:], prog="python -m attnsuite export-onnx")
    print("usage: python -m attnsuite export-onnx [options]   (the other subcommands: the attnsuite CLI)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
