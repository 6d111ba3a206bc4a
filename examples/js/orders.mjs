// Prices an order sent as JSON ({ "items": [{ "sku", "qty", "cents" }],
// "member": bool }) and answers JSON: a parsed request read field by
// field, plain objects built from it (the compiled path's tests).
export default {
  async fetch(request) {
    const order = await request.json();
    const items = order.items;
    const lines = [{ sku: "", qty: 0, cents: 0 }];
    let subtotal = 0, count = 0;
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      const qty = item.qty;
      if (qty <= 0 || qty !== Math.floor(qty)) {
        return Response.json({ error: "a quantity must be a whole number above 0", sku: item.sku }, { status: 400 });
      }
      // Bulk pricing: 5% off from 10, 10% off from 100, in whole cents.
      const rate = qty >= 100 ? 90 : qty >= 10 ? 95 : 100;
      const cents = Math.floor((item.cents * qty * rate) / 100);
      subtotal += cents;
      count += qty;
      lines.push({ sku: item.sku, qty, cents });
    }
    const discount = order.member ? Math.floor(subtotal / 20) : 0;
    const tax = Math.floor(((subtotal - discount) * 8) / 100);
    return Response.json({
      lines: lines.length - 1,
      count,
      subtotal,
      discount,
      tax,
      total: subtotal - discount + tax,
      detail: lines,
    });
  },
};
