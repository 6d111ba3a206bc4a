// Prices an order ({ "items": [{ "sku", "qty" }] }) against a price list
// another service keeps (env.PRICES_URL answers { "skus": ["s0", …],
// "cents": [120, …] }): outbound HTTP and the environment from compiled
// code (the compiled path's tests).
export default {
  async fetch(request, env) {
    const order = await request.json();
    const r = await fetch(env.PRICES_URL);
    if (!r.ok) {
      return Response.json({ error: "the price list answered " + r.status }, { status: 502 });
    }
    const prices = await r.json();
    const skus = prices.skus;
    const cents = prices.cents;
    const items = order.items;
    let total = 0, unknown = 0;
    for (let i = 0; i < items.length; i++) {
      const sku = items[i].sku;
      let found = -1;
      for (let j = 0; j < skus.length; j++) {
        if (skus[j] === sku) {
          found = j;
          break;
        }
      }
      if (found < 0) {
        unknown++;
      } else {
        total += cents[found] * items[i].qty;
      }
    }
    return Response.json({ items: items.length, unknown, total });
  },
};
