"""Your own PyTorch training loop, continually evaluated by clgate: three added calls.

Run: ``.venv/bin/python examples/own_loop.py out/own`` (a few seconds on a CPU), then
``.venv/bin/clgate metrics out/own/log.json`` or gate it with a policy. The model, data, optimizer
and loop are the user's own; only the lines marked ``# clgate`` are added.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from clgate import Recorder


def main(out_dir: Path) -> Path:
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    tasks = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    model = torch.nn.Sequential(torch.nn.Linear(64, 200), torch.nn.ReLU(), torch.nn.Linear(200, 10))

    recorder = Recorder(x_test, y_test, tasks=tasks, eval_every=10, meta={"strategy": "finetune"})  # clgate

    for classes in tasks:
        mask = np.isin(y_train, classes)
        xt, yt = torch.from_numpy(x_train[mask]), torch.from_numpy(y_train[mask])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _epoch in range(3):
            for batch in torch.randperm(len(yt)).split(16):
                loss = F.cross_entropy(model(xt[batch]), yt[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                recorder.step(model, samples=len(batch))  # clgate: counts the update, evaluates every 10
        recorder.task_end(model, train_size=len(yt), train_bytes=xt.nbytes + yt.nbytes)  # clgate

    out_dir.mkdir(parents=True, exist_ok=True)
    return recorder.save(out_dir / "log.json")  # clgate


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "out/own")))
