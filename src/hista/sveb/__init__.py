"""SVEB, the State Value Estimation Benchmark (SPEC §8): build cases, evaluate estimators
against Monte-Carlo targets, report tables and plots."""
