"""JUnit XML for the commands that give verdicts (``--junit PATH``, and bringup's junit.xml): one
testsuite, a testcase per verdict, the provenance as properties, so a CI's test report shows each
stage, erratum, fault or sweep run. The one writer of JUnit in the project."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from firstlight.provenance import provenance

__all__ = ["Case", "junit_xml", "write_junit"]


@dataclass(frozen=True)
class Case:
    """One testcase: ``status`` "passed", "failed" (a verdict on the chip), "error" (the harness
    could not tell) or "skipped"; ``message`` one line, ``details`` the rest."""

    name: str
    classname: str
    status: str
    message: str = ""
    details: str = ""
    seconds: float = 0.0
    output: str = ""  # the testcase's system-out (a stage's figures as JSON)
    kind: str = ""  # the result's type attribute; default: "chip failure" / "harness error"


def junit_xml(suite_name: str, cases: list[Case], properties: dict | None = None, *,
              timestamp: str | None = None, host: str | None = None) -> JUnitXml:
    """The document: ``properties`` after the provenance's commit, command and platform; the
    suite's time and host are now's and this machine's unless given (a report written earlier)."""
    suite = TestSuite(suite_name)
    prov = provenance(None)
    suite.timestamp, suite.hostname = timestamp or prov["timestamp"], host or prov["host"]
    for k, v in {**{k: prov[k] for k in ("git_commit", "command", "platform") if prov.get(k)}, **(properties or {})}.items():
        suite.add_property(k, str(v))
    for c in cases:
        case = TestCase(c.name, classname=c.classname, time=round(float(c.seconds), 3))
        if c.status == "failed":
            res = Failure(c.message, c.kind or "chip failure")
        elif c.status == "error":
            res = Error(c.message, c.kind or "harness error")
        elif c.status == "skipped":
            res = Skipped(c.message)
        elif c.status == "passed":
            res = None
        else:
            raise ValueError(f"a testcase's status is passed, failed, error or skipped, not {c.status!r}")
        if res is not None:
            if c.details:
                res.text = c.details[:20000]
            case.result = [res]
        if c.output:
            case.system_out = c.output
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    return xml


def write_junit(path: Path, suite_name: str, cases: list[Case], properties: dict | None = None) -> Path:
    path = Path(path)
    junit_xml(suite_name, cases, properties).write(str(path))
    return path
