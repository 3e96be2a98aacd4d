"""A neural ranking model for ``evaluate.py --variants mlp``: TenSet's MLP over MetaSchedule's per-block features.

Each block's row (its features, then the device's descriptor, standardised by the training rows' mean and spread)
goes through a small MLP to one number; a program scores the sum of its blocks' (pack-sum, as the boosted ranker
does), and the network learns with the ranker's own loss: a pairwise logistic loss within each workload, a pair
weighing the gap of its programs' gains 2^(4 x relevance). Trained with Adam on batches of whole workloads.
PyTorch (CPU) is the corpus extra's; nothing here ships.
"""

from __future__ import annotations

import numpy as np

from bench.predictor import dataset
from registry.tvm_side import ranker


class MLP:
    """``fit`` on workloads, then ``rank`` one workload's programs (higher: predicted faster), as ``Variant`` does."""

    def __init__(self, hidden: int = 256, layers: int = 3, epochs: int = 40, batch: int = 32, lr: float = 1e-3,
                 seed: int = 0, sharpness: float = ranker.SHARPNESS, weight_decay: float = 1e-5) -> None:  # fmt: skip
        self.hidden, self.layers, self.epochs, self.batch, self.lr = hidden, layers, epochs, batch, lr
        self.seed, self.sharpness, self.weight_decay = seed, sharpness, weight_decay

    def _rows(self, d: dataset.WorkloadData):
        import torch

        rows, program = ranker.block_rows(d.blocks, d.device)
        return torch.from_numpy((rows - self.mean) / self.scale), torch.from_numpy(program.astype(np.int64))

    def fit(self, train: list[dataset.WorkloadData], nthread: int = 2) -> None:
        import torch

        torch.manual_seed(self.seed)
        torch.set_num_threads(max(1, nthread))
        train = [d for d in train if d.size >= 2]
        every = np.concatenate([ranker.block_rows(d.blocks, d.device)[0] for d in train])
        self.mean = every.mean(axis=0).astype(np.float32)
        self.scale = np.maximum(every.std(axis=0), 1e-3).astype(np.float32)
        width = every.shape[1]
        parts: list = []
        for k in range(self.layers - 1):
            parts += [torch.nn.Linear(width if k == 0 else self.hidden, self.hidden), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*parts, torch.nn.Linear(self.hidden, 1))
        optimiser = torch.optim.Adam(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        epochs = self.epochs
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=epochs)
        prepared = []
        for d in train:
            rows, program = self._rows(d)
            gains = np.exp2(self.sharpness * ranker.relevance(np.asarray(d.mean_s, float)))
            weight = np.maximum(gains[:, None] - gains[None, :], 0.0)  # (i, j): i the faster
            weight /= max(weight.sum(), 1e-12)  # each workload counts once, however many programs
            prepared.append((rows, program, weight.astype(np.float32)))
        longest = max(len(w) for *_, w in prepared)  # the most programs a workload has: each batch is padded to it
        rng = np.random.default_rng(self.seed)
        self.net.train()
        for _ in range(epochs):
            order = rng.permutation(len(prepared))
            for start in range(0, len(order), self.batch):
                chosen = [prepared[k] for k in order[start : start + self.batch]]
                rows = torch.cat([c[0] for c in chosen])
                # every block's score lands on its program's place in a (workloads, programs) grid
                place = torch.cat([program + k * longest for k, (_, program, _) in enumerate(chosen)])
                weight = np.zeros((len(chosen), longest, longest), np.float32)
                for k, (*_, w) in enumerate(chosen):
                    weight[k, : len(w), : len(w)] = w
                s = torch.zeros(len(chosen) * longest).index_add(0, place, self.net(rows).squeeze(1))
                s = s.view(len(chosen), longest)
                margin = s[:, :, None] - s[:, None, :]  # s_i - s_j
                loss = (torch.from_numpy(weight) * torch.nn.functional.softplus(-margin)).sum() / len(chosen)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            schedule.step()
        self.net.eval()

    def rank(self, d: dataset.WorkloadData) -> np.ndarray:
        import torch

        rows, program = self._rows(d)
        with torch.no_grad():
            out = self.net(rows).squeeze(1)
            return torch.zeros(d.size).index_add(0, program, out).numpy().astype(float)
