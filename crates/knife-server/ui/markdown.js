// A small Markdown renderer that builds DOM nodes directly: text only ever goes
// through text nodes, so raw HTML in model output (`<script>`, `<img onerror>`)
// shows as the characters it is and never runs. Supports what agents write most:
// paragraphs, headings, fenced code, lists, block quotes, rules, and inline code,
// bold, italic and links (http, https and mailto only).

import { h } from './dom.js';

/** Block quotes nest at most this deep; deeper `>` stay literal text. */
const MAX_QUOTE_DEPTH = 8;

/**
 * Renders `text` as Markdown into a new <div class="md">. Linear in the input's
 * size for any input (no regular expression here backtracks over a whole line,
 * nothing recurses per character), so a 1 MB model message renders in well under
 * a second even when it is made of unclosed markers.
 */
export function markdown(text, depth = 0) {
  const root = h('div', { class: 'md' });
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end of a still-streaming block)
      const code = h('code', fence[2] ? { 'data-lang': fence[2] } : {}, body.join('\n'));
      root.append(h('pre', { class: 'code' }, code));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(h(`h${Math.min(heading[1].length + 2, 6)}`, {}, inline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      root.append(h('hr'));
      i += 1;
      continue;
    }
    if (depth < MAX_QUOTE_DEPTH && /^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ''));
      root.append(h('blockquote', {}, markdown(body.join('\n'), depth + 1)));
      continue;
    }
    const bullet = /^\s*[-*+]\s+/;
    const numbered = /^\s*\d+[.)]\s+/;
    if (bullet.test(line) || numbered.test(line)) {
      const re = bullet.test(line) ? bullet : numbered;
      const list = h(re === bullet ? 'ul' : 'ol');
      while (i < lines.length && re.test(lines[i])) {
        let item = lines[i++].replace(re, '');
        // Continuation lines (indented, not a new item) belong to the item.
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !re.test(lines[i])) item += ` ${lines[i++].trim()}`;
        list.append(h('li', {}, inline(item)));
      }
      root.append(list);
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i], depth)) para.push(lines[i++]);
    if (!para.length) para.push(lines[i++]);
    const p = h('p');
    para.forEach((l, n) => {
      if (n) p.append(h('br'));
      // (a loop, not `append(...nodes)`: a long line can make more nodes than a
      // call may take arguments)
      for (const node of inline(l)) p.append(node);
    });
    root.append(p);
  }
  return root;
}

function startsBlock(line, depth) {
  return /^\s*(```|~~~)/.test(line) || /^#{1,6}\s/.test(line) || (depth < MAX_QUOTE_DEPTH && /^\s*>/.test(line))
    || /^\s*[-*+]\s+/.test(line) || /^\s*\d+[.)]\s+/.test(line);
}

/** Inline Markdown of one line as an array of nodes. */
export function inline(text) {
  const out = [];
  // Order matters: code spans first (their content is literal), then links, bold,
  // italic. Every group stops at the first character that could close it, so a
  // failed match costs at most the distance to the next marker, never a rescan
  // of the rest of the line (`[[[[…` or `` ``a`a`a… `` stay linear).
  const re = /``((?:[^`]|`(?!`))+)``|`([^`]+)`|\[([^[\]]+)\]\(([^()\s]+)\)|\*\*\*([^*]+)\*\*\*|\*\*((?:[^*]|\*(?!\*))+)\*\*|(?<!\w)__((?:[^_]|_(?!_))+)__(?!\w)|\*([^*\s][^*]*)\*|(?<!\w)_([^_\s][^_]*)_(?!\w)/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    if (m[1] !== undefined || m[2] !== undefined) out.push(h('code', {}, (m[1] ?? m[2]).replace(/^ (.*) $/, '$1')));
    else if (m[3] !== undefined) out.push(link(m[3], m[4]));
    else if (m[5] !== undefined) out.push(h('strong', {}, h('em', {}, inline(m[5]))));
    else if (m[6] !== undefined || m[7] !== undefined) out.push(h('strong', {}, inline(m[6] ?? m[7])));
    else out.push(h('em', {}, inline(m[8] ?? m[9])));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

function link(label, href) {
  let url = null;
  try {
    url = new URL(href, location.href);
  } catch {
    url = null;
  }
  if (!url || !['http:', 'https:', 'mailto:'].includes(url.protocol)) {
    return `[${label}](${href})`; // javascript:, data:, … stay plain text
  }
  return h('a', { href: url.href, target: '_blank', rel: 'noopener noreferrer' }, inline(label));
}
