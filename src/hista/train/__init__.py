"""Training: TRL's GRPOTrainer with hista estimators and losses, driven by recipes.

    from hista.train import load_recipe, train
    train(load_recipe("recipes/cpu-smoke.yaml", ["loss.name=strace"]))
"""

from .curves import plot_reward_curves, read_metrics, reward_summary
from .recipe import Recipe, load_recipe, validate
from .run import measure_pool, train

__all__ = ["Recipe", "load_recipe", "measure_pool", "plot_reward_curves", "read_metrics", "reward_summary", "train",
           "validate"]
