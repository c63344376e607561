// hooklane console: conveniences only. Every page works without this file;
// it is served from /console/static/ because the pages' CSP runs no inline
// script.
(function () {
  'use strict';
  // Times are printed in UTC; the reader's own local time is their tooltip.
  document.querySelectorAll('time[datetime]').forEach(function (t) {
    var d = new Date(t.getAttribute('datetime'));
    if (!isNaN(d.getTime())) t.title = d.toLocaleString();
  });
  // The new secret, shown once: a button copies it.
  document.querySelectorAll('button[data-copy]').forEach(function (b) {
    var src = document.getElementById(b.getAttribute('data-copy'));
    if (!src || !navigator.clipboard) return;
    b.hidden = false;
    b.addEventListener('click', function () {
      navigator.clipboard.writeText(src.textContent).then(function () { b.textContent = 'Copied'; });
    });
  });
  // A page showing a delivery under way reloads itself (the server sets
  // data-refresh only then), unless the operator is filling in a form.
  var every = Number(document.body.getAttribute('data-refresh'));
  if (every > 0) {
    var edited = false;
    document.addEventListener('input', function () { edited = true; });
    var tick = function () {
      if (edited) return;
      var a = document.activeElement;
      if (a && a.form) { setTimeout(tick, every * 1000); return; }
      location.reload();
    };
    setTimeout(tick, every * 1000);
  }
})();
