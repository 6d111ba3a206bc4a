// π by Monte Carlo with the host's randomness and clocks: a CPU-bound
// function whose compiled code asks the host for the same random bytes and
// times as the isolate does, so its tapes are the same whichever ran
// (bench/js.sh, the compiled path's tests).
export default {
  async fetch(request) {
    const n = Number(await request.text());
    const started = performance.now();
    let inside = 0;
    for (let i = 0; i < n; i++) {
      const x = Math.random();
      const y = Math.random();
      if (x * x + y * y <= 1) inside++;
    }
    const forward = performance.now() >= started;
    return new Response(`${inside} of ${n} inside at ${Date.now()}, clock forward: ${forward}`);
  },
};
