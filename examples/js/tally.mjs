// Counts the words in the request and keeps a running total in KV: host
// calls from compiled code (the compiled path's tests). A word of over 40
// letters is refused, which no training request has.
export default {
  async fetch(request) {
    const text = await request.text();
    let words = 0, longest = 0, run = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if ((c >= 65 && c <= 90) || (c >= 97 && c <= 122)) {
        run++;
        if (run === 1) words++;
        if (run > longest) longest = run;
      } else {
        run = 0;
      }
    }
    const total = Number((await hearth.kv.get("words")) ?? "0") + words;
    await hearth.kv.set("words", String(total));
    if (longest > 40) {
      return new Response("a word of " + longest + " letters", { status: 422 });
    }
    return Response.json({ words, longest, total });
  },
};
