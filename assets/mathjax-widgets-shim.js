// The ipywidgets controls typeset their labels with MathJax 2's API
// (MathJax.Hub.Queue); the book loads MathJax 3, which has no Hub, and every widget
// label then throws "Cannot read properties of undefined (reading 'Queue')". This
// configures MathJax 3 (it loads after this script) with a small Hub.Queue stand-in
// that forwards to MathJax 3's typesetPromise, queueing requests made before it is ready.
// Loaded with `defer`, so it runs after Sphinx's inline MathJax options and before the
// deferred MathJax script, and extends those options instead of replacing them.
(function () {
  var pending = [];
  var hub = { Queue: function (job) { pending.push(job && job[2]); } };
  var config = window.MathJax || {};
  config.Hub = hub;
  config.startup = Object.assign(config.startup || {}, {
      ready: function () {
        MathJax.startup.defaultReady();
        MathJax.Hub = {
          Queue: function (job) {
            var el = job && job[2];
            MathJax.typesetPromise(el ? [el] : undefined).catch(function () {});
          },
        };
        pending.forEach(function (el) { MathJax.Hub.Queue(["Typeset", null, el]); });
        pending = [];
      },
  });
  window.MathJax = config;
})();
