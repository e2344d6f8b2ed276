"""The load page of ``weaveplace serve`` (``GET /``): one self-contained HTML page.

No external URL (no CDN, fonts or images): the page is rendered on the server from
``Service.status()`` and the recent load (``cluster.service.load_history``), both embedded so
it shows the state at once, and a small inline script re-fetches ``/status`` and ``/history``
every 2 s (the token travels in the cookie ``GET /?token=`` set) and redraws:

- history over the last minutes as inline SVG, one line per node: planned cost, measured busy
  share, queue depth and answers/s, every event of ``events.jsonl`` a dashed vertical line
  coloured by its ``command`` (any kind, by a hash of its name: no kind is special);
- now: per node planned cost vs measured load (bars), trees and queries per node, watermark
  lag, backlog, late tuples, answers and the event log; with WG_PF, the rule that chose the
  last plan and whether it was met (its note when not); with ``placement.shedding``, the
  kept fractions in force and the rows dropped.
"""

from __future__ import annotations

import html
import json
import re
import time

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em;margin:0 0 .4em} h2{font-size:1.05em;margin:1.1em 0 .3em}
table{border-collapse:collapse} td,th{padding:.2em .6em;text-align:left;border-bottom:1px solid #ddd}
.bar{height:12px;background:#eee;width:260px;position:relative;margin:2px 0}
.bar span{position:absolute;left:0;top:0;bottom:0}
.planned span{background:#4a7ebb} .measured span{background:#d9822b}
.kv span{margin-right:1.6em} code{font-size:12px} .small{color:#666;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:.6em} .charts svg{border:1px solid #ddd;background:#fff}
.legend span{margin-right:1.2em;font-size:12px} .sw{display:inline-block;width:18px;height:3px;
vertical-align:middle;margin-right:4px} .warn{color:#b00020}
"""

_SCRIPT = """
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
function fmt(x,d){return x==null?'-':(typeof x==='number'?x.toFixed(d==null?2:d):esc(x))}
function path(s){var p=s.data_path||{},bad=(p.stuck||[]).concat(p.silent||[]);
  return '<span>data path <b>'+(p.busy?esc(p.busy)+' '+fmt(p.busy_s,1)+' s':'free')+'</b></span>'+
    (bad.length?'<span class="warn">silent <b>'+bad.map(esc).join(', ')+'</b></span>':'')+
    (s.stale_s>2?'<span class="warn">figures '+fmt(s.stale_s,0)+' s old</span>':'')}
function shed(h){if(!h)return '';var k=Object.keys(h.keep).filter(x=>h.keep[x]<1);
  return '<span class="shed'+(k.length?' warn':'')+'">shedding <b>'+(k.length?k.map(x=>esc(x)+
    ' keeps '+fmt(h.keep[x],3)).join(', '):'off')+'</b> (dropped '+Object.keys(h.dropped_rows)
    .reduce((a,x)=>a+h.dropped_rows[x],0)+' rows)</span>'}
function draw(s){
  if(!s.nodes){document.getElementById('summary').innerHTML='<span>state <b>'+esc(s.state)+
    '</b></span>'+path(s);return}
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
      '</td><td>'+fmt(m.queue_depth,0)+'</td><td>'+esc((d.health||{}).state||'-')+
      ((d.health||{}).state=='silent'||(d.health||{}).state=='stuck'?' '+fmt(d.health.silent_s,1)+' s':'')+
      '</td><td>'+(m.lag_ms==null?'-':fmt(m.lag_ms/1000,1)+' s')+
      '</td><td>'+d.queries+'</td><td class="small">'+trees+'</td></tr>'}
  document.getElementById('nodes').innerHTML=rows;
  var wm=s.watermark||{},lag=[];
  for(var k in wm){lag.push(esc(k)+': '+(wm[k]==null||s.event_time==null?'-':(s.event_time-wm[k])+' ms'))}
  document.getElementById('summary').innerHTML=
    '<span>state <b>'+esc(s.state)+'</b></span><span>queries <b>'+s.queries.length+'</b></span>'+
    '<span>TotalCost <b>'+fmt(s.total_cost,4)+'</b></span><span>MaxCost <b>'+fmt(s.max_cost,4)+'</b></span>'+
    '<span>files <b>'+s.files+'</b></span><span>backlog <b>'+s.backlog.files+' files</b></span>'+
    '<span>answers <b>'+s.answers+'</b></span><span>late <b>'+s.late+'</b></span>'+
    '<span>watermark lag '+(lag.join(', ')||'-')+'</span>'+path(s)+shed(s.shedding)+
    (s.choose?'<span class="choose">WG_PF rule <b>'+esc(s.choose.rule)+'</b>'+
      (s.choose.default?' (default)':'')+(s.choose.met?' met':' <b>not met</b>: '+
      esc(s.choose.note))+'</span>':'');
  document.getElementById('queries').textContent=s.queries.join(', ');
  document.getElementById('events').innerHTML=s.events.slice().reverse().map(e=>
    '<tr><td>'+new Date(e.wall_time*1000).toISOString().slice(11,19)+'</td><td>'+fmt(e.event_time,0)+
    '</td><td>'+esc(e.command)+'</td><td>'+fmt(e.trees_moved,0)+'</td><td>'+fmt(e.total_cost_before,4)+
    ' &rarr; '+fmt(e.total_cost_after,4)+'</td><td>'+fmt(e.max_cost_before,4)+' &rarr; '+
    fmt(e.max_cost_after,4)+'</td></tr>').join('');
}
var PAL=['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f',
  '#bcbd22','#17becf'];
var EVPAL=['#b10026','#6a3d9a','#8c510a','#01665e','#c51b7d','#4d4d4d','#b35806','#2166ac'];
function kindColor(k){var h=7;k=String(k);for(var i=0;i<k.length;i++){h=(h*31+k.charCodeAt(i))>>>0}
  return EVPAL[h%EVPAL.length]}
function hhmmss(t){return new Date(t*1000).toISOString().slice(11,19)}
var EVENTS=[];
function chart(h,key,title){
  var W=560,H=160,L=54,R=12,T=20,B=22,names=Object.keys(h.nodes).sort();
  var t1=h.now,first=h.t.length?h.t[0]:t1;
  EVENTS.forEach(e=>{first=Math.min(first,e.wall_time)});
  var t0=Math.max(t1-h.window_s,first-2);if(t1-t0<10)t0=t1-10;
  var ymax=0;names.forEach(n=>h.nodes[n][key].forEach(v=>{if(v!=null)ymax=Math.max(ymax,v)}));
  if(!(ymax>0))ymax=1;ymax*=1.08;
  var X=t=>L+(W-L-R)*(t-t0)/(t1-t0),Y=v=>T+(H-T-B)*(1-v/ymax);
  var o='<svg class="chart" data-key="'+key+'" width="'+W+
    '" height="'+H+'"><text x="'+L+'" y="13" font-size="12" font-weight="bold">'+esc(title)+'</text>'+
    '<line x1="'+L+'" y1="'+(H-B)+'" x2="'+(W-R)+'" y2="'+(H-B)+'" stroke="#999"/>'+
    '<line x1="'+L+'" y1="'+T+'" x2="'+L+'" y2="'+(H-B)+'" stroke="#999"/>'+
    '<text x="'+(L-4)+'" y="'+(T+9)+'" font-size="10" text-anchor="end">'+fmt(ymax,ymax<10?2:0)+'</text>'+
    '<text x="'+(L-4)+'" y="'+(H-B)+'" font-size="10" text-anchor="end">0</text>'+
    '<text x="'+L+'" y="'+(H-6)+'" font-size="10">'+hhmmss(t0)+'</text>'+
    '<text x="'+(W-R)+'" y="'+(H-6)+'" font-size="10" text-anchor="end">'+hhmmss(t1)+' UTC</text>';
  EVENTS.forEach(e=>{if(e.wall_time<t0||e.wall_time>t1)return;var x=X(e.wall_time).toFixed(1);
    o+='<line class="event" data-command="'+esc(e.command)+'" x1="'+x+'" x2="'+x+'" y1="'+T+
      '" y2="'+(H-B)+'" stroke="'+kindColor(e.command)+'" stroke-width="1.5" stroke-dasharray="4,3">'+
      '<title>'+esc(e.command)+' at '+hhmmss(e.wall_time)+'</title></line>'});
  names.forEach((n,i)=>{var vs=h.nodes[n][key],run=[];
    var flush=function(){if(run.length>1)o+='<polyline class="series" data-node="'+esc(n)+
      '" fill="none" stroke-width="1.6" stroke="'+PAL[i%PAL.length]+'" points="'+run.join(' ')+'"/>';
      else if(run.length==1){var p=run[0].split(',');o+='<circle class="series" data-node="'+esc(n)+
      '" r="2.5" fill="'+PAL[i%PAL.length]+'" cx="'+p[0]+'" cy="'+p[1]+'"/>'}run=[]};
    for(var j=0;j<h.t.length;j++){var v=vs[j];
      if(v==null||h.t[j]<t0){flush();continue}run.push(X(h.t[j]).toFixed(1)+','+Y(v).toFixed(1))}
    flush()});
  return o+'</svg>';
}
function drawHistory(h){
  var names=Object.keys(h.nodes).sort(),kinds={};EVENTS.forEach(e=>{kinds[e.command]=1});
  document.getElementById('legend').innerHTML=names.map((n,i)=>'<span><i class="sw" style="background:'+
    PAL[i%PAL.length]+'"></i>'+esc(n)+'</span>').join('')+' &nbsp; events: '+Object.keys(kinds).sort()
    .map(k=>'<span class="evkind"><i class="sw" style="background:'+kindColor(k)+'"></i>'+esc(k)+
    '</span>').join('');
  document.getElementById('charts').innerHTML=chart(h,'planned_cost','planned cost')+
    chart(h,'busy_share','measured busy share (busy s / wall s)')+
    chart(h,'queue_depth','queue depth (calls waiting)')+chart(h,'answers_per_s','answers/s');
}
var INITIAL=__STATUS__, HISTORY=__HISTORY__; EVENTS=INITIAL.events; draw(INITIAL); drawHistory(HISTORY);
setInterval(function(){
  fetch('status',{credentials:'same-origin'}).then(r=>r.ok?r.json():null)
  .then(s=>{if(s){if(s.events)EVENTS=s.events;draw(s)}}).catch(()=>{});
  fetch('history',{credentials:'same-origin'}).then(r=>r.ok?r.json():null)
  .then(h=>{if(h)drawHistory(h)}).catch(()=>{})},2000);
"""


def render_page(service) -> str:
    """The page with the current status embedded (redrawn by the inline script)."""
    st = service.status()
    data = json.dumps(st, default=str).replace("</", "<\\/")
    hist = json.dumps(service.load_history.series(time.time()), default=str).replace("</", "<\\/")
    name = html.escape(str(service.run_dir))
    values = {"STATUS": data, "HISTORY": hist}  # one pass: a value may contain a placeholder
    script = re.sub(r"__(STATUS|HISTORY)__", lambda m: values[m.group(1)], _SCRIPT)
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>weaveplace serve: {name}</title><style>{_STYLE}</style></head><body>
<h1>weaveplace deployment <code>{name}</code></h1>
<div class="kv" id="summary"></div>
<h2>The last minutes, per node (events dashed, by command)</h2>
<div class="legend" id="legend"></div><div class="charts" id="charts"></div>
<h2>Nodes: planned cost (blue, share of the largest) and measured busy share (orange)</h2>
<table><thead><tr><th>node</th><th>load</th><th>planned cost</th><th>busy share</th>
<th>tuples/s</th><th>queue</th><th>health</th><th>event lag</th><th>queries</th><th>trees</th></tr></thead>
<tbody id="nodes"></tbody></table>
<h2>Queries</h2><div id="queries" class="small"></div>
<h2>Events (newest first)</h2>
<table><thead><tr><th>wall (UTC)</th><th>event time</th><th>command / cause</th><th>trees moved</th>
<th>TotalCost</th><th>MaxCost</th></tr></thead><tbody id="events"></tbody></table>
<script>{script}</script></body></html>"""
