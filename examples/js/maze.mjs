// Shortest path from corner to corner of an N×N maze (walls from a fixed
// LCG), by breadth-first search, per request: CPU-bound js
// (bench/js.sh, the compiled path's tests).
export default {
  fetch() {
    const N = 120;
    let seed = 42;
    const rnd = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    const wall = new Uint8Array(N * N);
    for (let i = 0; i < N * N; i++) wall[i] = rnd() < 0.28 ? 1 : 0;
    wall[0] = 0; wall[N * N - 1] = 0;
    const dist = new Int32Array(N * N).fill(-1);
    const queue = new Int32Array(N * N);
    let head = 0, tail = 0;
    queue[tail++] = 0; dist[0] = 0;
    while (head < tail) {
      const c = queue[head++], x = c % N, y = (c / N) | 0;
      for (const [dx, dy] of [[1, 0], [-1, 0], [0, 1], [0, -1]]) {
        const nx = x + dx, ny = y + dy;
        if (nx < 0 || ny < 0 || nx >= N || ny >= N) continue;
        const n = ny * N + nx;
        if (wall[n] || dist[n] >= 0) continue;
        dist[n] = dist[c] + 1;
        queue[tail++] = n;
      }
    }
    return new Response(String(dist[N * N - 1]));
  },
};
