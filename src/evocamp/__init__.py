"""evocamp: Snakemake evaluation campaigns for quality diversity, ES and BO.

The package is imported by every pipeline step, so it imports nothing heavy here.
"""

__version__ = "0.1.0"
