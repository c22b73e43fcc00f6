"""Repository-root shim: ``python cli.py fit --config ...`` (what W&B sweep programs run)."""

from lightning_fed.cli import main

if __name__ == "__main__":
    main()
