#!/usr/bin/python3
"""Loss and test accuracy per epoch from the trainers' metrics.csv files, one PNG.

    plot.py OUT.png RUN/metrics.csv [OTHER/metrics.csv ...]     (needs python3-matplotlib)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if len(sys.argv) < 3:
    sys.exit(__doc__)
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
for path in sys.argv[2:]:
    rows = list(csv.DictReader(open(path)))
    epochs = [int(r["epoch"]) for r in rows]
    label = path.rsplit("/", 2)[-2] if "/" in path else path
    left.plot(epochs, [float(r["loss"]) for r in rows], marker="o", label=label)
    right.plot(epochs, [100 * float(r["test_accuracy"]) for r in rows], marker="o", label=label)
left.set(xlabel="epoch", ylabel="training loss", title="loss")
right.set(xlabel="epoch", ylabel="test accuracy (%)", title="accuracy")
for ax in (left, right):
    ax.grid(True, alpha=0.3)
    ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=110)
print(f"plot written to {sys.argv[1]}")
