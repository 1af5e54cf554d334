"""Train the recording probe run of tests/train/test_train.py (``recording_trainer``: 6 steps of the
probe on the tiny model, a checkpoint every step) into OUT, in a process of its own, for a test
to kill it:

    python tests/helpers/probe_run.py OUT
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from test_train import recording_trainer  # noqa: E402

if __name__ == "__main__":
    trainer, _ = recording_trainer(Path(sys.argv[1]))
    trainer.train()
