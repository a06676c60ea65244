"""Opening a DB: migrating it under one write lock, refusing what diag cannot use, and saying why in
one line; the few statements every write shares."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

import sqlite_utils

from diag.errors import DiagError
from diag.store.schema import MIGRATIONS
from diag.store.stamps import stamp_triggers
from diag.store.views import create_views


class StoreError(DiagError):
    """A database diag cannot use: not SQLite, written by a newer diag, or not writable."""


def explain(exc: sqlite3.Error, path: Path) -> str:
    """One line that says what is wrong with the DB at ``path``, from SQLite's own error."""
    message = str(exc)
    lowered = message.lower()
    folder = path.parent if str(path.parent) else Path(".")
    if ("unable to open" in lowered or "readonly" in lowered or "read-only" in lowered) and not _writable(folder):
        return (
            f"cannot write {path}: its folder {folder} is not writable, and SQLite creates its journal "
            "(-wal, -shm) beside the database; make the folder writable or copy the database elsewhere"
        )
    if "disk i/o error" in lowered and _disk_full(folder):
        return f"the disk holding {path} is full ({message})"
    if "not a database" in lowered or "file is encrypted" in lowered:
        return f"{path} is not a diag database ({message})"
    if "malformed" in lowered or "corrupt" in lowered:
        return f"{path} is damaged ({message}); restore it from a copy"
    if "readonly" in lowered or "read-only" in lowered:
        return f"{path} is read-only: diag can read it but not add runs to it ({message})"
    if "disk is full" in lowered or "no space" in lowered:
        return f"the disk holding {path} is full ({message})"
    if "unable to open" in lowered:
        return f"cannot open {path}: is its folder readable and writable? ({message})"
    return f"{path}: {message}"


def check_path(path: Path) -> bool:
    """Whether a DB file is at ``path`` (False: nothing is there yet); StoreError where something
    else is, before anything opens, resolves or creates it."""
    kind = path_kind(path)
    if kind not in (None, "file"):
        raise StoreError(f"{path} is {kind}, not a database file")
    return kind == "file"


def path_kind(path: Path) -> str | None:
    """What is at ``path``: None for nothing, "file" for a regular file (through symbolic links), else
    what is there, as a phrase: SQLite would block on a FIFO, write a device, or fail on a loop."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return None if exc.errno == errno.ENOTDIR else f"unreadable ({exc.strerror})"
    for test, phrase in _KINDS:
        if test(mode):
            return phrase
    return "not a regular file"


_KINDS = (
    (stat.S_ISREG, "file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK)


def _disk_full(folder: Path) -> bool:
    """Too little room left on ``folder``'s disk for SQLite to write a page and its journal."""
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


def open_db(path: str | Path, create: bool = True, readonly: bool = False) -> sqlite_utils.Database:
    """Open (and migrate) the DB at ``path``; StoreError with a one-line reason when unusable.

    ``readonly`` opens without ever writing to the file: a DB of an older schema is then migrated
    in a copy held in memory, so that inputs (merge's shards, a read-only history) stay untouched.
    A DB this call created and could not set up is removed again.
    """
    path = Path(path)
    existed = check_path(path)
    if not existed and not create:
        raise StoreError(f"no database at {path}")
    try:
        return _open(path, readonly and existed)
    except (sqlite3.Error, StoreError) as exc:
        if not existed:
            _remove_db_files(path)
        else:
            _remove_torn_wal_files(path)
        if isinstance(exc, StoreError):
            raise
        raise StoreError(explain(exc, path)) from exc


def _open(path: Path, readonly: bool) -> sqlite_utils.Database:
    conn = connect(path, readonly)
    try:
        return _set_up(conn, path, readonly)
    except BaseException:
        conn.close()  # a failed open holds no file open: its torn -wal/-shm can be removed
        raise


def connect(path: Path, readonly: bool, timeout: float = 60) -> sqlite3.Connection:
    """A bare connection to the DB at ``path`` (no migration, no checks): ``open_db``'s, and that of
    a quick read beside a command that writes (``timeout``: how long to wait for a lock)."""
    if readonly and not Path(f"{path}-wal").exists() and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
        # A read-only connection to a WAL database leaves the -wal and -shm files it opened behind
        # (a published site would carry them). With no -wal there is nothing to checkpoint, so a
        # read-write connection that refuses writes reads the same and removes them when it closes.
        conn = sqlite3.connect(str(path), timeout=timeout)
        conn.execute("PRAGMA query_only = ON")
    elif readonly:
        conn = _read_only(path, timeout)
    else:
        conn = sqlite3.connect(str(path), timeout=timeout)
    return conn


def _set_up(conn: sqlite3.Connection, path: Path, readonly: bool) -> sqlite_utils.Database:
    conn.execute(f"PRAGMA busy_timeout = {PATIENCE_S * 1000}")
    tables = _tables(conn)
    db = sqlite_utils.Database(conn)
    _check_known(db, tables, path)
    if any(name not in _applied(db, tables) for name, _ in MIGRATIONS):
        if readonly:
            memory = sqlite3.connect(":memory:")
            conn.backup(memory)
            conn.close()
            conn, db = memory, sqlite_utils.Database(memory)
        _migrate(conn, db, path)
    conn.execute("PRAGMA foreign_keys = ON")
    # Text that is not UTF-8 (a probe's raw output, a hand-edited DB) reads with its bad bytes
    # escaped: every command that reads the DB goes on, and no raw control bytes reach a terminal.
    conn.text_factory = _decode_text
    return db


def _read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection that never writes. A WAL database in a folder this user cannot write cannot
    be opened so: SQLite cannot create the -shm file a reader shares with writers. Nothing can
    write beside it either, so it is then read as an immutable file, as it is on disk."""
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        if _writable(path.parent):
            raise
        conn.close()
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=timeout)


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def dict_rows(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
    """Every row of ``sql`` as a dict. Read with SQLite's own UTF-8 decoding, which is several times
    quicker than a decoding function per text value; where some text is not UTF-8, read again with
    its bad bytes escaped, as every other read does."""
    factory = conn.text_factory
    try:
        conn.text_factory = str
        cursor = conn.execute(sql, params)
        found = cursor.fetchall()
    except sqlite3.OperationalError as error:
        if "decode" not in str(error):
            raise
        conn.text_factory = factory
        cursor = conn.execute(sql, params)
        found = cursor.fetchall()
    finally:
        conn.text_factory = factory
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in found]


def _remove_db_files(path: Path) -> None:
    """Remove a DB file this process created and could not set up: only while it is still empty,
    since a process racing to create the same DB may have filled it meanwhile."""
    try:
        if path.stat().st_size > 0:
            return
    except OSError:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{path}{suffix}")
        except OSError:
            pass


def _remove_torn_wal_files(path: Path) -> None:
    """An empty -wal and a -shm shorter than one wal-index page (32 KiB), left by a connection that
    could not write them (a full disk): they hold nothing, and while they stay every reader of the
    database fails ("disk I/O error") until the disk has room again."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    try:
        if wal.stat().st_size == 0 and shm.stat().st_size < 32768:
            shm.unlink()
            wal.unlink()
    except OSError:
        pass


PATIENCE_S = 60  # how long a write waits for another process that holds the DB


def begin_writing(conn: sqlite3.Connection, path: Path) -> None:
    """Open a write transaction holding the write lock (BEGIN IMMEDIATE). Where another process
    holds it (a merge, a prune, another diag run saving), wait up to PATIENCE_S, and say on stderr
    what diag waits for: a silent minute reads as a hang."""
    conn.execute("PRAGMA busy_timeout = 0")
    deadline = None
    try:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc).lower() or (deadline is not None and time.monotonic() > deadline):
                    raise
                if deadline is None:
                    deadline = time.monotonic() + PATIENCE_S
                    print(
                        f"diag: another process is writing {path}; waiting for it (up to {PATIENCE_S} s)",
                        file=sys.stderr,
                        flush=True,
                    )
                time.sleep(0.05)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {PATIENCE_S * 1000}")


def check_writable(path: str | Path) -> None:
    """StoreError unless runs can be added to the existing DB at ``path``: a write, rolled back."""
    db = open_db(path, create=False)
    conn = db.conn
    level = conn.isolation_level
    conn.isolation_level = None
    try:
        begin_writing(conn, Path(path))
        try:
            # A lock alone does not tell: a connection SQLite opened read-only can take one.
            conn.execute("CREATE TABLE diag_write_check (x)")
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise StoreError(explain(exc, Path(path))) from exc
    finally:
        conn.isolation_level = level
        conn.close()


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _migrate(conn: sqlite3.Connection, db: sqlite_utils.Database, path: Path) -> None:
    """Apply the pending migrations as one transaction that holds the write lock from the start.

    Two processes opening the same new DB at once both see it unmigrated; ``BEGIN IMMEDIATE``
    makes the second wait for the first, and it re-reads what is applied once it holds the lock.
    The sqlite3 module would commit DDL statement by statement, so the transaction is explicit.
    """
    level = conn.isolation_level
    conn.isolation_level = None
    try:
        begin_writing(conn, path)
        try:
            tables = _tables(conn)
            _check_known(db, tables, path)
            applied = _applied(db, tables)
            pending = [(name, fn) for name, fn in MIGRATIONS if name not in applied]
            for name, fn in pending:
                fn(db)
                insert(conn, "migrations", {"name": name, "applied_at": now()})
            if pending:
                create_views(conn)
                stamp_triggers(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.isolation_level = level
    _use_wal(conn)


def _use_wal(conn: sqlite3.Connection, patience_s: float = 60.0) -> None:
    """Switch a new DB to WAL, so readers never wait for a writer.

    The switch needs every other connection gone and SQLite does not wait for that on its own
    (no busy handler), so it is retried until this or another process has made it.
    """
    if conn.execute("PRAGMA journal_mode").fetchone()[0] == "memory":
        return  # a DB held in memory (a read-only input's migrated copy) has no journal file
    deadline = time.monotonic() + patience_s
    while conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _applied(db: sqlite_utils.Database, tables: set[str]) -> set[str]:
    if "migrations" not in tables:
        return set()
    return {row["name"] for row in db.query("SELECT name FROM migrations")}


def _check_known(db: sqlite_utils.Database, tables: set[str], path: Path) -> None:
    known = {name for name, _ in MIGRATIONS}
    if tables and "migrations" not in tables:
        raise StoreError(f"{path} is an SQLite database but not one diag wrote (no migrations table)")
    unknown = _applied(db, tables) - known
    if unknown:
        raise StoreError(
            f"{path} was written by a newer diag (migrations {', '.join(sorted(unknown))}); upgrade diag to read it"
        )


def now() -> str:
    """The time a run or a row is stamped with: UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _storable(value: Any) -> Any:
    """Text as SQLite can hold it: lone surrogates (undecodable bytes) become backslash escapes."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def insert(conn: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> int:
    columns = ", ".join(f'"{c}"' for c in row)
    marks = ", ".join("?" for _ in row)
    cursor = conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', [_storable(v) for v in row.values()])
    rowid = cursor.lastrowid
    assert rowid is not None  # an INSERT sets it
    return rowid


def integrity(db: sqlite_utils.Database) -> str:
    return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def path_of(db: sqlite_utils.Database) -> Path:
    """The file behind ``db`` (empty for a DB held in memory)."""
    return Path(db.conn.execute("PRAGMA database_list").fetchone()[2] or "")
