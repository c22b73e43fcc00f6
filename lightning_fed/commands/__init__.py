"""The ``lightning-fed`` commands, one module each; :mod:`lightning_fed.cli` dispatches to them.

- :mod:`~lightning_fed.commands.fit`: train a federation into a run folder.
- :mod:`~lightning_fed.commands.evaluate`: ``test``, re-evaluate a finished run.
- :mod:`~lightning_fed.commands.refer`: the referral table of an EdgeDRM run.
- :mod:`~lightning_fed.commands.describe`: ``data describe``, the per-center table of a data source.
- :mod:`~lightning_fed.commands.sweep`: a grid of configs x seeds.
- :mod:`~lightning_fed.commands.report`: tables and plots over run folders.
- :mod:`~lightning_fed.commands.common`: what they share (argv, instantiation, rebuilding a run).

Run-folder lifecycle: :mod:`lightning_fed.runfolder.session`; exits and signals:
:mod:`lightning_fed.processes`; the ``fit`` parser: :mod:`lightning_fed.fit_parser`.
"""
