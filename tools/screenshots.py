"""Regenerate ``docs/screenshots/*.png``: every page of the web UI, in English and in
Chinese, light and dark, on a desktop and on a phone.

Starts ``veritask up`` in a temporary folder with the repository's examples, runs a few of
them through the API, then drives Chromium (``/usr/bin/chromium``, or ``VERITASK_CHROMIUM``)
with Playwright and saves each page as ``PAGE.LANGUAGE.png`` (desktop, light), with
``.dark`` and ``.phone`` before ``.png`` for the others. Run it with ``make screenshots``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import httpx
from playwright.sync_api import Page, ViewportSize, sync_playwright

ROOT: Final = Path(__file__).resolve().parent.parent
OUTPUT: Final = ROOT / "docs" / "screenshots"
CHROMIUM: Final = os.environ.get("VERITASK_CHROMIUM", "/usr/bin/chromium")
VIEWPORT: Final[ViewportSize] = {"width": 1280, "height": 860}
PHONE: Final[ViewportSize] = {"width": 390, "height": 844}
#: Each look: the suffix of its files, the viewport, the theme.
LOOKS: Final = (
    ("", VIEWPORT, "light"),
    (".dark", VIEWPORT, "dark"),
    (".phone", PHONE, "light"),
    (".phone.dark", PHONE, "dark"),
)
ZONE: Final = "Asia/Shanghai"
BROKEN: Final = "name: broken\ntasks:\n  a: {run: echo a, after: [missing]}\n"
#: Expected to finish in two seconds, runs for two minutes: each run raises a deadline alert.
LATE: Final = """\
name: nightly_export
description: Exports the day's orders to the warehouse
owner: data-platform
expected_finish: 2s
concurrency: allow
tasks:
  export: {run: "sleep 120"}
"""


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60.0) -> object:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def start(home: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERITASK_")}
    env["VERITASK_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT / "examples")
    process = subprocess.Popen(
        [sys.executable, "-m", "veritask.cli.main", "up", "--port", "0", "--examples", "examples"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: (home / "url").exists() and (home / "token").exists(), "veritask up")
    url = (home / "url").read_text().strip()
    token = (home / "token").read_text().strip()
    wait_for(lambda: _ready(url), "the API")
    return process, url, token


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def run_examples(url: str, token: str) -> dict[str, str]:
    """Trigger a few examples and wait until each run has finished; their run ids."""
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    started = {
        name: api.post(f"/api/v2/definitions/{name}/runs", json={}).json()["run_id"]
        for name in ("branching", "hello", "progress")
    }

    def finished() -> bool:
        states = [
            api.get(f"/api/v2/runs/{run}").json()["execution_state"] for run in started.values()
        ]
        return all(state in ("SUCCESS", "FAILED", "CANCELLED") for state in states)

    wait_for(finished, "the example runs", timeout=120)
    return started


def raise_alerts(url: str, token: str) -> list[str]:
    """Two late runs of ``nightly_export``: the scheduler raises a deadline alert for each;
    one is acknowledged, so the alerts page shows both statuses. The runs' ids."""
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    api.post("/api/v2/definitions", json={"source": LATE}).raise_for_status()
    late = [
        api.post("/api/v2/definitions/nightly_export/runs", json={}).json()["run_id"]
        for _ in range(2)
    ]

    def raised() -> list[dict[str, object]]:
        items: list[dict[str, object]] = api.get("/api/v2/alerts").json()["items"]
        return items if len(items) >= len(late) else []

    found = wait_for(raised, "the deadline alerts", timeout=60)
    assert isinstance(found, list)
    api.post(f"/api/v2/alerts/{found[-1]['id']}/acknowledge").raise_for_status()
    return late


def cancel(url: str, token: str, run_ids: list[str]) -> None:
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    for run_id in run_ids:
        api.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "screenshots taken"})


def shoot(page: Page, url: str, name: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(OUTPUT / f"{name}.png"), full_page=False)


def main() -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="veritask-shots-") as folder:
        process, url, token = start(Path(folder) / "home")
        try:
            runs = run_examples(url, token)
            late = raise_alerts(url, token)
            api = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
            detail = api.get(f"/api/v2/runs/{runs['progress']}").json()
            instance = detail["instances"][0]["id"]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=["--no-sandbox"]
                )
                for language in ("en", "zh"):
                    for suffix, viewport, theme in LOOKS:
                        context = browser.new_context(viewport=viewport, timezone_id=ZONE)
                        context.add_cookies(
                            [
                                {"name": "veritask_tz", "value": ZONE, "url": url},
                                {"name": "veritask_lang", "value": language, "url": url},
                                {"name": "veritask_theme", "value": theme, "url": url},
                            ]
                        )
                        page = context.new_page()
                        pages = {
                            "definitions": "/ui/definitions",
                            "definition": "/ui/definitions/branching",
                            "grid": "/ui/definitions/hello/grid",
                            "runs": "/ui/runs",
                            "run": f"/ui/runs/{runs['branching']}",
                            "instance": f"/ui/instances/{instance}",
                            "health": "/ui/health",
                            "alerts": "/ui/alerts",
                        }
                        take = f"{language}{suffix}"
                        shoot(page, url + "/", f"sign-in.{take}")
                        page.fill("#token", token)
                        page.click("form[action='/ui/sign-in'] button[type=submit]")
                        page.wait_for_url("**/ui/definitions")
                        for name, address in pages.items():
                            shoot(page, url + address, f"{name}.{take}")
                        page.goto(url + "/ui/definitions/new")
                        page.fill("#source", BROKEN)
                        page.click("#editor-form button[type=submit]")
                        page.wait_for_selector(".editor-error")
                        page.screenshot(path=str(OUTPUT / f"editor.{take}.png"))
                        context.close()
                browser.close()
            cancel(url, token, late)
        finally:
            process.terminate()
            process.wait(30)
            subprocess.run([sys.executable, "-c", _STOP_SUPERVISOR, folder + "/home"], check=False)
    for path in sorted(OUTPUT.glob("*.png")):
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size // 1024} KiB")


# The local executor's supervisor outlives `up` on purpose; this tool leaves none behind.
_STOP_SUPERVISOR: Final = (
    "import sys, pathlib; from veritask.execution import local; "
    "local.LocalExecutor(home=pathlib.Path(sys.argv[1])).shutdown_supervisor()"
)


if __name__ == "__main__":
    main()
