// The approvals inbox, enhanced: when the daemon says the pending calls
// changed (server-sent events), fetch the page again and swap its main
// part; count down the time left. Without JavaScript the page still works
// with plain forms and reloads.
(function () {
  'use strict';

  function showProblem(text) {
    var main = document.querySelector('main');
    if (!main || document.getElementById('connection')) return;
    var notice = document.createElement('p');
    notice.id = 'connection';
    notice.className = 'notice error';
    notice.setAttribute('role', 'alert');
    notice.textContent = text;
    main.prepend(notice);
  }

  function refresh() {
    // This page's own address, so the notice of the last answer stays.
    fetch(window.location.href, { credentials: 'same-origin' })
      .then(function (response) {
        if (!response.ok) throw new Error('HTTP ' + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html').querySelector('main');
        var main = document.querySelector('main');
        if (fresh && main) main.replaceWith(fresh);
        tick();
      })
      .catch(function () { showProblem('Lost touch with toolgate; reload the page.'); });
  }

  function tick() {
    document.querySelectorAll('[data-expires]').forEach(function (cell) {
      var left = Math.max(0, Math.round((Number(cell.dataset.expires) - Date.now()) / 1000));
      cell.textContent = left > 0 ? Math.floor(left / 60) + ' min ' + (left % 60) + ' s' : 'expired';
    });
  }

  if (document.getElementById('pending') && window.EventSource) {
    // The session's own address, relative to its page.
    var events = new EventSource('events');
    events.addEventListener('changed', refresh);
    events.onerror = function () { showProblem('Live updates stopped; reload the page.'); };
  }
  tick();
  setInterval(tick, 1000);
})();
