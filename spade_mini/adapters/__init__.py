"""The adapters to other ecosystems: a run's environments outside the loop that made them.

    registration.py  gymnasium ids for the bundled, held-out and exported environments; read_suite
    export.py        a run's valid environments as a suite folder (python -m spade_mini.adapters.export)
    trl_env.py       SuiteEnv: an exported suite as TRL GRPOTrainer's environment_factory
    trl_grpo.py      GRPOTrainer on a run's environments (python -m spade_mini.adapters.trl_grpo)

Nothing in the iteration's steps imports this folder; the files import each other directly.
"""
