-- `audit verify` reads every row of every table, so a damaged block fails it (store/integrity.py).

-- name: tables
SELECT schema_name, table_name FROM duckdb_tables()
WHERE database_name = current_database() AND NOT internal
ORDER BY schema_name, table_name;
