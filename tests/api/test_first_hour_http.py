"""What a newcomer meets in the first hour: error pages, units, /metrics, startup warnings."""

from prometheus_client import CONTENT_TYPE_LATEST


def test_metrics_content_type_has_one_charset(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert response.headers["Content-Type"].count("charset") == 1
