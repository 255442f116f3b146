"""JUnit XML for the commands that give verdicts (``--junit PATH``): one testsuite, a testcase per
verdict, the provenance as properties, so a CI's test report shows each erratum or fault."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

__all__ = ["Case", "write_junit"]


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


def write_junit(path: Path, suite_name: str, cases: list[Case], properties: dict | None = None) -> Path:
    from firstlight.bringup.report import provenance

    suite = TestSuite(suite_name)
    prov = provenance(None)
    suite.timestamp, suite.hostname = prov["timestamp"], prov["host"]
    for k, v in {**{k: prov[k] for k in ("git_commit", "command", "platform") if prov.get(k)}, **(properties or {})}.items():
        suite.add_property(k, str(v))
    for c in cases:
        case = TestCase(c.name, classname=c.classname, time=round(float(c.seconds), 3))
        if c.status == "failed":
            res = Failure(c.message, "chip failure")
        elif c.status == "error":
            res = Error(c.message, "harness error")
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
        suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    path = Path(path)
    xml.write(str(path))
    return path
