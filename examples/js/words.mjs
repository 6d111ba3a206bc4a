// Words, vowels and the longest word of the request's text: string
// processing (bench/js.sh, the compiled path's tests).
function isLetter(c) { return (c >= 97 && c <= 122) || (c >= 65 && c <= 90); }
export default {
  async fetch(request) {
    const text = await request.text();
    let words = 0, longest = 0, run = 0, vowels = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (isLetter(c)) {
        run++;
        const l = c | 32;
        if (l === 97 || l === 101 || l === 105 || l === 111 || l === 117) vowels++;
      } else {
        if (run > 0) words++;
        longest = Math.max(longest, run);
        run = 0;
      }
    }
    if (run > 0) words++;
    longest = Math.max(longest, run);
    return new Response(`words=${words} longest=${longest} vowels=${vowels}`);
  },
};
