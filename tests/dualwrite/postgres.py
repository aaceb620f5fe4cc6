"""The throwaway PostgreSQL server of the tests is the order demo's."""

from onceflow.demo.postgres import PostgresServer, postgres_bin

__all__ = ["PostgresServer", "postgres_bin"]
