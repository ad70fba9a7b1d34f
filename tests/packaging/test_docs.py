"""The documentation's snippets work: Python ones run against a real server, the others parse.

Go and Java snippets are checked for syntax with the toolchain's own parser where one is
installed (``gofmt``; a JDK's ``java``), and skipped with the reason where not. docs/go.md's
snippets are also compiled and run against a real server (tests/examples/test_go_client.py).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.doc_snippets import snippets
from tests.fixtures.fix_server import ServerHandle

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# Written by other engineers at the same time as the links to them.
PENDING = {"docs/performance.md"}


def local(code: str, server: ServerHandle, group_id: str) -> str:
    """A snippet pointed at the test's server and group."""
    return (
        code.replace("127.0.0.1:50051", server.address)
        .replace("python-orders-etl", group_id)
        .replace("readme-etl", group_id)
        .replace("orders-etl", group_id)
    )


def run(code: str, namespace: dict[str, object]) -> None:
    exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 - the docs' own code


# --- Python ---


@pytest.mark.parametrize("path", [p for p in DOCS if snippets(p, "python")], ids=lambda p: p.name)
def test_python_snippets_parse(path: Path) -> None:
    for code in snippets(path, "python"):
        ast.parse(code)


def test_readme_python_client_runs(server: ServerHandle, client: OffsetStoreClient, group_id: str) -> None:
    (code,) = snippets(ROOT / "README.md", "python")
    run(local(code, server, group_id), {})
    fetched = client.fetch_offsets(group_id)
    assert {tp: o.offset for tp, o in fetched.offsets.items()} == {("readme-orders", 0): 1100, ("readme-orders", 1): 77}
    # The compare-and-set was fenced: it carried the generation of the join.
    history = client.list_offset_history(group_id, topics={"readme-orders": [0]}).items
    assert [(c.new_offset, c.generation) for c in history] == [(1100, fetched.generation), (1042, fetched.generation)]


class ListSource:
    """The `source` of python.md's commit loop: batches of records, then the end."""

    class Record:
        def __init__(self, topic: str, partition: int, offset: int) -> None:
            self.topic, self.partition, self.offset = topic, partition, offset

    def __init__(self, batches: list[list[tuple[str, int, int]]]) -> None:
        self.batches = [[self.Record(*r) for r in batch] for batch in batches]
        self.seeks: dict[tuple[str, int], int] = {}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.seeks[(topic, partition)] = offset

    def poll(self) -> list[Record]:
        return self.batches.pop(0) if self.batches else []


def test_python_guide_snippets_run(server: ServerHandle, client: OffsetStoreClient, group_id: str) -> None:
    loop, cas, reset, stubs, raw_errors = snippets(ROOT / "docs" / "python.md", "python")

    namespace: dict[str, object] = {}
    run(local(loop, server, group_id), namespace)
    source = ListSource([[("python-orders", 0, 0), ("python-orders", 0, 1)], [("python-orders", 1, 5)]])
    namespace["consume"](source, group_id, "docs")  # type: ignore[operator]
    assert source.seeks == {("python-orders", 0): -1, ("python-orders", 1): -1, ("python-orders", 2): -1}
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {
        ("python-orders", 0): 2,
        ("python-orders", 1): 6,
    }

    client.commit_offsets(group_id, {("python-orders", 0): 1042})
    generation = client.join_group(group_id, "docs")
    run(cas, {**namespace, "client": client, "group": group_id, "generation": generation})
    assert client.fetch_offsets(group_id, {"python-orders": [0]}).offsets[("python-orders", 0)].offset == 1100

    # The previewed reset: applied at the generation the dry run answered.
    generation = client.fetch_offsets(group_id).generation
    run(local(reset, server, group_id), {"client": client})
    after = client.fetch_offsets(group_id)
    assert after.generation == generation + 1
    assert [after.offsets[("orders", p)].offset for p in (0, 1)] == [1200, 1200]

    run(local(stubs, server, group_id), namespace)
    assert client.fetch_offsets(group_id, {"python-orders": [0]}).offsets[("python-orders", 0)].offset == 42

    # A commit with a superseded generation: the snippet finds STALE_GENERATION in the details.
    stale = pb.CommitOffsetsRequest(
        group_id=group_id, generation=1, offsets=[pb.OffsetCommit(topic="orders", partition=0, offset=1)]
    )
    checked = raw_errors.replace("...  # stop;", "reasons.append(info.reason)  # stop;")
    assert checked != raw_errors
    reasons: list[str] = []
    run(checked, {**namespace, "request": stale, "reasons": reasons, "grpc": grpc})
    assert reasons == ["STALE_GENERATION"]


# --- links ---


def test_relative_links_point_to_files() -> None:
    missing = []
    for path in DOCS:
        for target in LINK.findall(path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (path.parent / target).resolve()
            name = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
            if not resolved.exists() and name not in PENDING:
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
    assert missing == []


def test_no_install_line_needs_a_pypi_release() -> None:
    # Options before the name too: `pip install --no-deps offsetstore` fails as the bare name does.
    told = [*DOCS, ROOT / "pyflink_integration" / "__init__.py", ROOT / "examples" / "flink" / "copy_topic.py"]
    offenders = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in told
        for line in path.read_text().splitlines()
        if re.search(r"pip install\s+(?:-\S+\s+)*['\"]?offsetstore\b", line)
    ]
    assert offenders == []


def test_the_one_machine_spark_recipe_without_pyspark_names_the_spark_extra() -> None:
    # `make run` installs no PySpark; docs/spark.md's recipe then runs examples/spark/orders_job.py.
    without_pyspark = (
        "import runpy, sys; sys.modules['pyspark'] = None; "
        "sys.argv = ['orders_job.py', '--database-url', 'postgresql://nobody@127.0.0.1:1/none']; "
        f"runpy.run_path({str(ROOT / 'examples/spark/orders_job.py')!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", without_pyspark], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "install the spark extra" in done.stderr and "Traceback" not in done.stderr
    assert ".venv/bin/pip install -e '.[spark]'" in (ROOT / "docs/spark.md").read_text()


# --- Go ---


def go_source(code: str) -> str:
    """A Go snippet as a file: imports kept, statements wrapped in a function."""
    lines = textwrap.dedent(code).splitlines()
    body = "\n".join(lines)
    declares = re.search(r"^(func|type|var|const|import)\b", body, re.MULTILINE)
    if declares:
        return f"package snippet\n\n{body}\n"
    return f"package snippet\n\nfunc snippet() {{\n{body}\n}}\n"


@pytest.mark.skipif(shutil.which("gofmt") is None, reason="no Go toolchain (gofmt) installed: Go snippets unchecked")
def test_go_snippets_parse(tmp_path: Path) -> None:
    blocks = snippets(ROOT / "docs" / "go.md", "go")
    assert blocks
    for i, code in enumerate(blocks):
        source = tmp_path / f"snippet{i}.go"
        source.write_text(go_source(code))
        result = subprocess.run(["gofmt", "-e", "-l", str(source)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"go.md snippet {i}:\n{result.stderr}\n{source.read_text()}"


# --- Java ---

JAVA_PARSER = """
import com.sun.source.util.JavacTask;
import java.util.List;
import javax.tools.*;

public class ParseOnly {
    public static void main(String[] args) throws Exception {
        JavaCompiler compiler = ToolProvider.getSystemJavaCompiler();
        DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
        StandardJavaFileManager files = compiler.getStandardFileManager(diagnostics, null, null);
        JavacTask task = (JavacTask) compiler.getTask(
            null, files, diagnostics, List.of("-proc:none"), null, files.getJavaFileObjects(args));
        task.parse();
        int errors = 0;
        for (Diagnostic<? extends JavaFileObject> d : diagnostics.getDiagnostics()) {
            if (d.getKind() == Diagnostic.Kind.ERROR) {
                System.out.println(d);
                errors++;
            }
        }
        System.exit(errors == 0 ? 0 : 1);
    }
}
"""


def java_source(code: str) -> str:
    """A Java snippet as a class: imports kept, declarations as members, statements in a method."""
    lines = textwrap.dedent(code).splitlines()
    imports = [line for line in lines if line.startswith("import ")]
    body = "\n".join(line for line in lines if not line.startswith("import "))
    if re.search(r"^(record|interface|class|final class|static|public|private)\b", body, re.MULTILINE):
        members = body
    else:
        members = f"void snippet() throws Exception {{\n{body}\n}}"
    return "\n".join(imports) + f"\n\nclass Snippet {{\n{members}\n}}\n"


def java_parser() -> str | None:
    java = shutil.which("java")
    if java is None:
        return None
    # A JRE has no compiler; the parser needs a JDK's jdk.compiler module.
    modules = subprocess.run([java, "--list-modules"], capture_output=True, text=True, timeout=60).stdout
    return java if "jdk.compiler" in modules else None


@pytest.mark.skipif(java_parser() is None, reason="no JDK (java with jdk.compiler) installed: Java snippets unchecked")
@pytest.mark.parametrize("guide", ["java.md", "flink.md"])
def test_java_snippets_parse(tmp_path: Path, guide: str) -> None:
    parser = tmp_path / "ParseOnly.java"
    parser.write_text(JAVA_PARSER)
    blocks = snippets(ROOT / "docs" / guide, "java")
    assert blocks
    sources = []
    for i, code in enumerate(blocks):
        source = tmp_path / f"Snippet{i}.java"
        source.write_text(java_source(code))
        sources.append(source)
    java = java_parser()
    assert java is not None
    result = subprocess.run(
        [java, str(parser), *map(str, sources)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
