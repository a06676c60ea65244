"""A page per graph break in the report: per GB id, and per key for a break without one."""

from __future__ import annotations

import re

from diag import report, store


def _rendered(db_path, tmp_path) -> dict[str, str]:
    return report.render(store.open_db(db_path), tmp_path / "site")


def test_each_gb_id_has_a_page_with_its_builds_cases_wordings_and_registry_entry(copied_db, tmp_path):
    db = store.open_db(copied_db)
    nightly = db.execute("SELECT id, version FROM torch_builds WHERE nightly_date IS NOT NULL").fetchone()
    # torch words the same break differently on the nightly (as it did from one minor to the next)
    db.execute(
        "UPDATE graph_breaks SET reason = 'Unsupported Tensor.item() call (reworded)' WHERE key = 'GB0124' "
        "AND run_id IN (SELECT id FROM runs WHERE torch_build_id = ?)",
        [nightly[0]],
    )
    db.conn.commit()
    files = _rendered(copied_db, tmp_path)
    listing = files["breaks.html"]
    assert '<a href="breaks/GB0124.html"><code>GB0124</code></a>' in listing
    assert "Graph breaks</a>" in files["index.html"]  # in the navigation of every page
    page = files["breaks/GB0124.html"]
    text = re.sub(r"<[^>]+>", "", page)
    assert "Seen on 2 builds, from 2.13.0+cpu to 2.14.0.dev20260101+cpu" in text and "dynamic_slice" in text
    assert 'href="https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html"' in page
    (run,) = db.execute(
        "SELECT max(r.id) FROM runs r JOIN graph_breaks g ON g.run_id = r.id WHERE g.key = 'GB0124' "
        "AND r.torch_build_id = ?",
        [nightly[0]],
    ).fetchone()
    assert f"diag repro {run} -o repro.py" in text
    wordings = re.findall(r'<p class="muted">on ([^<]+)</p>\s*<pre>([^<]*)', page)
    assert [(build, said[:26]) for build, said in wordings] == [
        ("2.13.0+cpu", "Encountered graph break th"),
        (nightly[1], "Unsupported Tensor.item() "),
    ]


def test_a_break_without_an_id_gets_a_page_by_its_key_and_every_link_resolves(copied_db, tmp_path):
    files = _rendered(copied_db, tmp_path)
    keys = [key for (key,) in store.open_db(copied_db).execute("SELECT DISTINCT key FROM graph_breaks")]
    assert any(not key.startswith("GB") for key in keys)
    pages = [name for name in files if name.startswith("breaks/")]
    assert len(pages) == len(keys)
    for name in ["breaks.html", *pages]:
        base = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
        for target in re.findall(r'href="([^"#]+)"', files[name]):
            if target.startswith("http"):
                continue
            resolved = re.sub(r"[^/]+/\.\./", "", base + target)
            assert resolved in files, (name, target)
