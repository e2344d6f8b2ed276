"""The load page of ``weaveplace serve`` (``GET /``): one self-contained HTML page.

No external URL (no CDN, fonts or images): the page is rendered on the server from
``Service.status()`` (so it shows the state even without JavaScript) and a small inline script
re-fetches ``/status`` every 2 s (the token travels in the cookie ``GET /?token=`` set) and
redraws: per node planned cost vs measured load (bars: planned cost share, measured busy share),
trees and queries per node, watermark lag, backlog, late tuples, answers and the event log;
with WG_PF, the rule that chose the last plan and whether it was met (its note when not).
"""

from __future__ import annotations

import html
import json

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em;margin:0 0 .4em} h2{font-size:1.05em;margin:1.1em 0 .3em}
table{border-collapse:collapse} td,th{padding:.2em .6em;text-align:left;border-bottom:1px solid #ddd}
.bar{height:12px;background:#eee;width:260px;position:relative;margin:2px 0}
.bar span{position:absolute;left:0;top:0;bottom:0}
.planned span{background:#4a7ebb} .measured span{background:#d9822b}
.kv span{margin-right:1.6em} code{font-size:12px} .small{color:#666;font-size:12px}
"""

_SCRIPT = """
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
function fmt(x,d){return x==null?'-':(typeof x==='number'?x.toFixed(d==null?2:d):esc(x))}
function draw(s){
  var mx=0; for(var n in s.nodes){mx=Math.max(mx,s.nodes[n].planned_cost||0)}
  var rows='';
  for(var n in s.nodes){var d=s.nodes[n],m=d.measured||{};
    var pw=mx>0?Math.round(260*(d.planned_cost||0)/mx):0;
    var bw=Math.round(260*Math.min(1,m.busy_share||0));
    var trees=Object.keys(d.trees).map(t=>esc(t)+': '+d.trees[t].map(esc).join(', ')).join('<br>');
    rows+='<tr class="node" data-node="'+esc(n)+'"><td><b>'+esc(n)+'</b></td><td>'+
      '<div class="bar planned"><span style="width:'+pw+'px"></span></div>'+
      '<div class="bar measured"><span style="width:'+bw+'px"></span></div></td><td>'+
      fmt(d.planned_cost,4)+'</td><td>'+fmt(m.busy_share,3)+'</td><td>'+fmt(m.tuples_per_s,0)+
      '</td><td>'+fmt(m.queue_depth,0)+'</td><td>'+d.queries+'</td><td class="small">'+trees+'</td></tr>'}
  document.getElementById('nodes').innerHTML=rows;
  var wm=s.watermark||{},lag=[];
  for(var k in wm){lag.push(esc(k)+': '+(wm[k]==null||s.event_time==null?'-':(s.event_time-wm[k])+' ms'))}
  document.getElementById('summary').innerHTML=
    '<span>state <b>'+esc(s.state)+'</b></span><span>queries <b>'+s.queries.length+'</b></span>'+
    '<span>TotalCost <b>'+fmt(s.total_cost,4)+'</b></span><span>MaxCost <b>'+fmt(s.max_cost,4)+'</b></span>'+
    '<span>files <b>'+s.files+'</b></span><span>backlog <b>'+s.backlog.files+' files</b></span>'+
    '<span>answers <b>'+s.answers+'</b></span><span>late <b>'+s.late+'</b></span>'+
    '<span>watermark lag '+(lag.join(', ')||'-')+'</span>'+
    (s.choose?'<span class="choose">WG_PF rule <b>'+esc(s.choose.rule)+'</b>'+
      (s.choose.default?' (default)':'')+(s.choose.met?' met':' <b>not met</b>: '+
      esc(s.choose.note))+'</span>':'');
  document.getElementById('queries').textContent=s.queries.join(', ');
  document.getElementById('events').innerHTML=s.events.slice().reverse().map(e=>
    '<tr><td>'+new Date(e.wall_time*1000).toISOString().slice(11,19)+'</td><td>'+fmt(e.event_time,0)+
    '</td><td>'+esc(e.command)+'</td><td>'+e.trees_moved+'</td><td>'+fmt(e.total_cost_before,4)+
    ' &rarr; '+fmt(e.total_cost_after,4)+'</td><td>'+fmt(e.max_cost_before,4)+' &rarr; '+
    fmt(e.max_cost_after,4)+'</td></tr>').join('');
}
var INITIAL=__STATUS__; draw(INITIAL);
setInterval(function(){fetch('status',{credentials:'same-origin'}).then(r=>r.ok?r.json():null)
  .then(s=>{if(s)draw(s)}).catch(()=>{})},2000);
"""


def render_page(service) -> str:
    """The page with the current status embedded (redrawn by the inline script)."""
    st = service.status()
    data = json.dumps(st, default=str).replace("</", "<\\/")
    name = html.escape(str(service.run_dir))
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>weaveplace serve: {name}</title><style>{_STYLE}</style></head><body>
<h1>weaveplace deployment <code>{name}</code></h1>
<div class="kv" id="summary"></div>
<h2>Nodes: planned cost (blue, share of the largest) and measured busy share (orange)</h2>
<table><thead><tr><th>node</th><th>load</th><th>planned cost</th><th>busy share</th>
<th>tuples/s</th><th>queue</th><th>queries</th><th>trees</th></tr></thead>
<tbody id="nodes"></tbody></table>
<h2>Queries</h2><div id="queries" class="small"></div>
<h2>Events (newest first)</h2>
<table><thead><tr><th>wall (UTC)</th><th>event time</th><th>command / cause</th><th>trees moved</th>
<th>TotalCost</th><th>MaxCost</th></tr></thead><tbody id="events"></tbody></table>
<script>{_SCRIPT.replace("__STATUS__", data)}</script></body></html>"""
