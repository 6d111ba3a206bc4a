// Summary statistics of the comma-separated integers in the request, as
// JSON: plain objects, an array of them, `Response.json` (bench/js.sh,
// the compiled path's tests).
export default {
  async fetch(request) {
    const text = await request.text();
    if (text.length === 0) {
      return Response.json({ error: "send comma-separated integers" }, { status: 400 });
    }
    let n = 1;
    for (let i = 0; i < text.length; i++) {
      if (text.charCodeAt(i) === 44) n++;
    }
    // Parse, by hand: a sign, digits, a comma.
    const xs = new Float64Array(n);
    let k = 0, value = 0, sign = 1, digits = 0;
    for (let i = 0; i <= text.length; i++) {
      const c = i < text.length ? text.charCodeAt(i) : 44;
      if (c === 45 && digits === 0 && sign === 1) {
        sign = -1;
      } else if (c >= 48 && c <= 57) {
        value = value * 10 + (c - 48);
        digits++;
      } else if (c === 44 && digits > 0) {
        xs[k++] = sign * value;
        value = 0;
        sign = 1;
        digits = 0;
      } else {
        return Response.json({ error: "not an integer", at: i }, { status: 400 });
      }
    }
    // Sorted, by insertion.
    let sum = 0;
    for (let i = 0; i < n; i++) {
      const x = xs[i];
      sum += x;
      let j = i - 1;
      while (j >= 0 && xs[j] > x) {
        xs[j + 1] = xs[j];
        j--;
      }
      xs[j + 1] = x;
    }
    // Runs of equal values, and the longest.
    const runs = [{ value: xs[0], count: 1 }];
    for (let i = 1; i < n; i++) {
      const last = runs[runs.length - 1];
      if (xs[i] === last.value) {
        last.count++;
      } else {
        runs.push({ value: xs[i], count: 1 });
      }
    }
    let top = runs[0];
    for (const run of runs) {
      if (run.count > top.count) top = run;
    }
    const median = Math.floor((xs[(n - 1) >> 1] + xs[n >> 1]) / 2);
    return Response.json({
      count: n,
      sum,
      mean: Math.floor(sum / n),
      min: xs[0],
      max: xs[n - 1],
      median,
      top,
      distinct: runs.length,
      runs,
    });
  },
};
