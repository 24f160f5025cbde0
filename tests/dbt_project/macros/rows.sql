{#- the integers 0..n-1 as a relation, and the index as a double #}
{% macro index() %}{{ return(adapter.dispatch('index')()) }}{% endmacro %}
{% macro duckdb__index() %}cast(t.range as double){% endmacro %}
{% macro default__index() %}cast(t.i as double precision){% endmacro %}
{% macro integers(n) %}{{ return(adapter.dispatch('integers')(n)) }}{% endmacro %}
{% macro duckdb__integers(n) %}range({{ n }}) t{% endmacro %}
{% macro default__integers(n) %}generate_series(0, {{ n }} - 1) t(i){% endmacro %}
