"""Training: TRL's GRPOTrainer with hista estimators and losses, driven by recipes.

    from hista.train import load_recipe, train
    train(load_recipe("recipes/cpu-smoke.yaml", ["loss.name=strace"]))
"""

from .recipe import Recipe, load_recipe, validate
from .run import train

__all__ = ["Recipe", "load_recipe", "train", "validate"]
