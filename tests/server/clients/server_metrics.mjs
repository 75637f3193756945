// What a client test reads from duet's /metrics to see the server side of an abort: the request was cancelled.
export async function cancelledRequests(url, apiKey) {
  const text = await (await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${apiKey}` } })).text();
  const line = text.split("\n").find((l) => l.startsWith("duet_requests_cancelled_total"));
  return Number(line.split(" ").pop());
}

// Waits (up to 10 s) until more requests than `before` were cancelled; throws otherwise.
export async function waitForCancel(url, apiKey, before) {
  for (let i = 0; i < 100; ++i) {
    if ((await cancelledRequests(url, apiKey)) > before) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("the aborted request was not cancelled on the server");
}
