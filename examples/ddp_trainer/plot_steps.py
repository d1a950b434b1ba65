#!/usr/bin/python3
"""The training loss step by step, from the trainer's --log-samples files (FILE.<rank>), for one
run or several side by side, e.g. an uninterrupted run and an --elastic one with a rank killed.

    plot_steps.py OUT.png LABEL=FILE [LABEL=FILE ...] [--mark E:S] [--epoch E]
                                                                   (needs python3-matplotlib)

A step's loss is the mean of the ranks' shares (each rank logs its share of the global batch's
mean; rolled-back steps are dropped). --mark draws a line at step S of epoch E (the kill);
--epoch plots that epoch only.
"""
import argparse
import glob


def applied_steps(prefix):
    """{(epoch, step): [(loss share, sample indices), one per rank that applied it]}, over every
    rank's file (FILE.<rank>); a rank's steps from a rollback on are dropped (all redid them)."""
    steps = {}
    for path in sorted(glob.glob(prefix + ".*")):
        mine = []
        for line in open(path).read().splitlines():
            what, epoch, step, *rest = line.split()
            if what == "rollback":
                mine = [m for m in mine if not (m[0] == int(epoch) and m[1] >= int(step))]
            else:
                mine.append((int(epoch), int(step), float(rest[0]), [int(i) for i in rest[1:]]))
        for epoch, step, loss, idx in mine:
            steps.setdefault((epoch, step), []).append((loss, idx))
    return dict(sorted(steps.items()))


def step_losses(prefix):
    """{(epoch, step): the mean of the ranks' logged shares}."""
    return {k: sum(loss for loss, _ in v) / len(v) for k, v in applied_steps(prefix).items()}


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("out")
    p.add_argument("runs", nargs="+", help="LABEL=FILE")
    p.add_argument("--mark", help="E:S, the step to mark")
    p.add_argument("--epoch", type=int, help="only this epoch")
    a = p.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for run in a.runs:
        label, prefix = run.split("=", 1)
        losses = step_losses(prefix)
        per_epoch = max(s for (_, s) in losses) + 1
        points = [((e - 1) * per_epoch + s, loss) for (e, s), loss in losses.items() if a.epoch in (None, e)]
        ax.plot([x for x, _ in points], [y for _, y in points], marker=".", markersize=3, label=label)
    if a.mark:
        e, s = (int(x) for x in a.mark.split(":"))
        ax.axvline((e - 1) * per_epoch + s, color="red", alpha=0.5, label=f"rank killed (epoch {e}, step {s})")
    ax.set(xlabel="step", ylabel="training loss", title="loss per step")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"plot written to {a.out}")


if __name__ == "__main__":
    main()
