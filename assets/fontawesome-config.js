// sphinx-book-theme's FontAwesome replaces <i class="fa ..."> icons with <svg>. Widgets
// keep references to their <i> elements (the Play widget's buttons, for one), and the
// replacement makes them throw, which silently breaks jslink chains. "nest" puts the
// <svg> inside the <i> instead of replacing it.
window.FontAwesomeConfig = Object.assign(window.FontAwesomeConfig || {}, { autoReplaceSvg: "nest" });
