// Helpers every dashboard page shares; loaded before the page's own script.
// Text from the API (names, errors, labels) goes into HTML only through esc.
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
