from sqlalchemy.engine import Connection, Engine

__all__ = ["Connection", "Engine"]
