"""The packages, found under the folders pyproject.toml maps (fuzz/ is parityfuzz, strategies/ is
parityfuzz.strategies); everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=[name for root, folder in (("parityfuzz", "fuzz"), ("parityfuzz.strategies", "strategies"))
                for name in (root, *(f"{root}.{sub}" for sub in find_packages(folder)))])
