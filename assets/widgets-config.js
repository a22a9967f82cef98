// The ipywidgets HTML manager finds its fonts relative to the URL require.js resolves
// for it; map its module path to the vendored copy beside this file so the fonts load
// from _static/widgets/ on every page (and never from a CDN).
(function () {
  var here = document.currentScript.src.replace(/widgets-config\.js.*$/, "");
  require.config({ paths: { "@jupyter-widgets/html-manager/dist": here + "widgets" } });
})();
