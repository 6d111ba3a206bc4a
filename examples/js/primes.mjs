// Primes up to the number in the request, by trial division, and a
// status that depends on it: numeric loops (bench/js.sh, the compiled
// path's tests).
export default {
  async fetch(request) {
    const n = Number(await request.text());
    let count = 0, sum = 0;
    for (let k = 2; k <= n; k++) {
      let prime = true;
      for (let d = 2; d * d <= k; d++) {
        if (k % d === 0) { prime = false; break; }
      }
      if (prime) { count++; sum += k; }
    }
    return new Response(count + " " + sum, { status: n > 30000 ? 201 : 200 });
  },
};
