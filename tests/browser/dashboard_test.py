"""The operator dashboard in a real browser: headless Chromium from the
system's packages, driven by Playwright, against a three-node cluster.

One scenario, step by step (each step needs the ones before it): sign in
through the form; find a dead delivery in the dead-letter view; replay it
once the receiver is fixed and watch it turn delivered; read its timeline
and its event; disable and enable an endpoint; move a shard and see its
owner change; stop the leader and see the page follow the new one. The
page is never reloaded, and the token never appears in a URL. Screenshots
of the main pages go to docs/screenshots/.

Usage: dashboard_test.py <hookraft binary> <chromium> <screenshot dir>
"""

import os
import re
import sys
import time

from playwright.sync_api import expect, sync_playwright

from harness import Cluster, Receiver, wait_for

UI_TIMEOUT_MS = 30_000
VIEWPORT = {"width": 1360, "height": 860}


DOWN = (503, 0, b"upstream database unavailable, try later")


def seed(cluster, receiver):
    """Four endpoints, so the pages have something to show: `orders` fails
    until the receiver is fixed (one delivery goes dead), `billing`
    answers, `inventory` answers slowly, `crm` answers 410 Gone and is
    disabled by it."""
    api = cluster.api(cluster.running()[0])
    retry = {"attempts_max": 2, "base_ms": 100, "cap_ms": 200}

    def endpoint(name, description, types, **more):
        body = {"url": receiver.url(name), "description": description, "event_types": types, **more}
        return api.post("/v1/endpoints", body)["id"]

    ids = {
        "orders": endpoint("orders", "orders service", ["order.created", "order.paid"], retry=retry),
        "billing": endpoint("billing", "billing ledger", ["invoice.issued"]),
        "inventory": endpoint("inventory", "stock levels", ["stock.reserved"]),
        "crm": endpoint("crm", "customer CRM (retired)", ["customer.updated"]),
    }
    receiver.replies.update({
        "orders": DOWN,
        "inventory": (200, 0.12, b"ok"),
        "crm": (410, 0, b"this hook was removed"),
    })
    dead_event = api.post("/v1/events", {
        "type": "order.created", "payload": {"order": 1042, "total": "129.00", "currency": "EUR"},
    })
    events = [("invoice.issued", {"invoice": 7000 + i}) for i in range(12)]
    events += [("stock.reserved", {"sku": f"SKU-{i:03}", "quantity": i + 1}) for i in range(8)]
    events += [("order.paid", {"order": 1043 + i}) for i in range(3)]
    events += [("customer.updated", {"customer": "cus_42", "plan": "pro"})]
    for event_type, payload in events:
        api.post("/v1/events", {"type": event_type, "payload": payload})
    dead = dead_event["deliveries"][0]["id"]
    wait_for("the order delivery to be dead", lambda: api.get(f"/v1/deliveries/{dead}")["state"] == "dead")
    wait_for("invoices and stock to be delivered", lambda: api.get("/v1/stats")["last_hour"]["delivered"] >= 20)
    wait_for("the CRM endpoint disabled by its 410", lambda: api.get(f"/v1/endpoints/{ids['crm']}")["disabled"])
    return {**ids, "dead": dead, "event": dead_event["id"]}


def shot(page, shots, name):
    """A picture of the page down to the end of its content."""
    height = page.evaluate("Math.ceil(document.getElementById('main').getBoundingClientRect().bottom) + 16")
    clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": height}
    page.screenshot(path=f"{shots}/{name}.png", clip=clip, full_page=True)


class Steps:
    def __init__(self):
        self.passed, self.failed = 0, 0

    def run(self, name, action):
        started = time.monotonic()
        try:
            action()
        except Exception:
            self.failed += 1
            print(f"FAIL {name}", flush=True)
            raise
        self.passed += 1
        print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)


def main(binary, chromium, shots):
    os.makedirs(shots, exist_ok=True)
    receiver = Receiver()
    cluster = Cluster(binary)
    steps = Steps()
    ok = False
    try:
        leader = cluster.leader()
        # The browser talks to a node that does not lead: it answers reads
        # from its replica and forwards changes, and it outlives the leader.
        browser_node = next(n for n in cluster.running() if n != leader)
        data = seed(cluster, receiver)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True)
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            urls = []
            page.on("request", lambda r: urls.append(r.url))
            page.on("dialog", lambda d: d.accept())
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            try:
                run_scenario(steps, page, cluster, receiver, data, browser_node, shots)
            except Exception:
                page.screenshot(path=f"{shots}/failure.png", full_page=True)
                print(f"the page as it was: {shots}/failure.png", flush=True)
                raise
            steps.run("the token never appeared in a URL, the page never failed", lambda: check_clean(urls, errors, cluster.token))
            browser.close()
        ok = True
    finally:
        cluster.stop(keep_logs=not ok)
        receiver.stop()
        print(f"browser: {steps.passed} passed, {steps.failed} failed", flush=True)


def check_clean(urls, errors, token):
    leaked = [u for u in urls if token in u]
    assert not leaked, f"the token is in a URL: {leaked}"
    # Answers such as the wrong token's 401, or a 503 while the cluster
    # elects a leader, are logged by the browser as failed resources; the
    # page shows them itself. Anything else is a fault of the page.
    real = [e for e in errors if "Failed to load resource" not in e]
    assert not real, f"the page reported errors: {real}"


def run_scenario(steps, page, cluster, receiver, data, node, shots):
    base = cluster.url(node)

    def sign_in():
        page.goto(base + "/")
        expect(page).to_have_url(re.compile(r"/ui$"))
        page.fill("#token", "not-the-token")
        page.click("button[type=submit]")
        expect(page.locator("#login-error")).to_contain_text("refused the token")
        page.fill("#token", cluster.token)
        page.click("button[type=submit]")
        expect(page.locator("#where")).to_contain_text(f"node {node}")
        # A mark that a reload would wipe: checked at the end.
        page.evaluate("window.__stillTheSamePage = true")
        assert page.evaluate("sessionStorage.getItem('hookraft.token')") == cluster.token
        expect(page.get_by_test_id("total-delivered")).not_to_have_text("0")
        expect(page.get_by_test_id("attention")).to_contain_text(data["orders_url"])
        shot(page, shots, "overview")

    def find_dead():
        page.click("nav >> text=Dead letters")
        expect(page).to_have_url(re.compile(r"#/deliveries\?state=dead$"))
        row = page.locator(f"tr[data-id='{data['dead']}']")
        expect(row).to_contain_text("dead")
        expect(row).to_contain_text("order.created")
        shot(page, shots, "dead-letters")
        row.get_by_test_id("delivery-link").click()
        expect(page.get_by_test_id("state")).to_have_text("dead")

    def replay():
        del receiver.replies["orders"]
        page.get_by_test_id("replay").click()
        expect(page.get_by_test_id("state")).to_have_text("delivered")

    def timeline():
        entries = page.get_by_test_id("timeline")
        attempts = entries.locator("li[data-kind=attempt]")
        expect(attempts).to_have_count(3)
        expect(attempts.first).to_contain_text("503")
        expect(attempts.first).to_contain_text("upstream database unavailable")
        expect(attempts.last).to_contain_text("204")
        expect(attempts.last).to_contain_text(re.compile(r"from node \d under token \d+"))
        expect(entries.locator("li[data-kind=leased]").first).to_contain_text(re.compile(r"node \d under token \d+"))
        expect(entries.locator("li[data-kind=replayed]")).to_have_count(1)
        expect(entries.locator("li[data-kind=delivered]")).to_have_count(1)
        shot(page, shots, "delivery")

    def event():
        page.click(f"a[href='#/events/{data['event']}']")
        expect(page.get_by_test_id("payload")).to_contain_text('"order": 1042')
        expect(page.get_by_test_id("event-deliveries")).to_contain_text("delivered")

    def endpoints():
        page.click("nav >> text=Endpoints")
        row = page.locator("tbody tr", has=page.locator(f"a:text-is('{data['billing_url']}')"))
        expect(row).to_contain_text("enabled")
        expect(row).to_contain_text("100%")
        row.get_by_test_id("disable").click()
        expect(row).to_contain_text("disabled")
        shot(page, shots, "endpoints")
        row.get_by_test_id("enable").click()
        expect(row).to_contain_text("enabled")
        api = cluster.api(node)
        assert api.get(f"/v1/endpoints/{data['billing']}")["disabled"] is False

    def move_shard():
        page.click("nav >> text=Cluster")
        shard = cluster.api(node).get("/v1/cluster")["shards"][7]
        target = next(n for n in cluster.running() if n != shard["owner"])
        cell = page.locator("[data-testid=shards] [data-shard='7']")
        expect(cell).to_have_attribute("data-owner", str(shard["owner"]))
        cell.click()
        page.select_option("#move-shard", "7")
        page.select_option("#move-node", str(target))
        page.get_by_test_id("move").click()
        expect(page.locator(".note.ok")).to_contain_text("Shard 7 revoked")
        expect(cell).to_have_attribute("data-owner", str(target))
        shot(page, shots, "cluster")

    def leader_change():
        old = cluster.leader()
        assert old != node, "the browser's node must outlive the leader"
        expect(page.get_by_test_id("leader")).to_have_text(f"node {old}")
        cluster.stop_node(old)
        expect(page.get_by_test_id("leader")).not_to_have_text(f"node {old}")
        expect(page.get_by_test_id("leader")).to_have_text(re.compile(r"node \d"))
        expect(page.locator(f"[data-testid=nodes] tr[data-node='{old}']")).to_contain_text("down")
        expect(page.locator("#where")).to_contain_text(f"node {node}")
        assert page.evaluate("window.__stillTheSamePage === true"), "the page was reloaded"

    data["orders_url"] = receiver.url("orders")
    data["billing_url"] = receiver.url("billing")
    steps.run("sign in through the form (a wrong token is refused)", sign_in)
    steps.run("find the dead delivery in the dead-letter view", find_dead)
    steps.run("replay it and watch it turn delivered", replay)
    steps.run("its timeline shows each attempt's status, node and token", timeline)
    steps.run("its event shows the payload and deliveries", event)
    steps.run("disable and enable an endpoint", endpoints)
    steps.run("move a shard and see the owner change", move_shard)
    steps.run("stop the leader and see the new one without a reload", leader_change)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
