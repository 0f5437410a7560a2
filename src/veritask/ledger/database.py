"""The ledger's database handles, named for the layers above, which do not import SQLAlchemy."""

from sqlalchemy.engine import Connection, Engine

__all__ = ["Connection", "Engine"]
