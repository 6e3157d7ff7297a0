"""Which backends survive `attnsuite.bench` inside a Python process on the GPU machine.

Each backend runs one small headline case (B1 N256, fp16) in its own child interpreter, once with
only attnsuite imported and once with torch imported first (PyTorch then loads its own cuDNN); the
table gives each child's exit status or the signal that killed it. Usage (the device script):
    PYTHONPATH=<build>/python python3 tools/device/python_peer_probe.py OUT.md
"""
import os
import subprocess
import sys
import tempfile

# One of ours as the control, the cuDNN peer, and one libtorch peer per kind (fused, materialized);
# more with ATTNSUITE_PROBE_BACKENDS=a,b,...
BACKENDS = (os.environ.get("ATTNSUITE_PROBE_BACKENDS") or "flash3,cudnn,torch-flash,torch-math").split(",")
CHILD = """
import sys
{pre}import attnsuite
rows = attnsuite.bench(backends=[sys.argv[1]], suite="headline", batch_sizes=[1], seq_lengths=[256],
                       timing={{"warmup": 1, "min_reps": 3, "max_time_ms": 50}}, out=sys.argv[2], force=True,
                       progress=False, dataframe=False)
print("STATUS", rows[0]["status"], rows[0].get("reason", ""))
"""


def probe(backend, torch_first):
    with tempfile.TemporaryDirectory() as out:
        code = CHILD.format(pre="import torch\n" if torch_first else "")
        try:
            done = subprocess.run([sys.executable, "-c", code, backend, out], capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired:
            return "timed out (120 s)"
        status = [line for line in done.stdout.splitlines() if line.startswith("STATUS")]
        if done.returncode < 0:
            return f"killed by signal {-done.returncode}"
        if done.returncode != 0:
            return f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:120]}"
        return status[0][7:] if status else "exit 0, no row"


def main():
    lines = ["| backend | attnsuite only | torch imported first |", "|---|---|---|"]
    for backend in BACKENDS:
        lines.append(f"| {backend} | {probe(backend, False)} | {probe(backend, True)} |")
        print(lines[-1], flush=True)
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
