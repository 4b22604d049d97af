"""External payload storage in Amazon S3 or any S3-compatible store, as temporalio.contrib.aws.s3driver:

    async with aioboto3.Session().client("s3") as s3:
        driver = S3StorageDriver(client=new_aioboto3_client(s3), bucket="my-payloads")
        converter = dataclasses.replace(DataConverter.default, external_storage=ExternalStorage(drivers=[driver]))

`S3StorageDriver` keys each payload by the SHA-256 of its bytes under the workflow it is stored for,
writes claims as temporalio's driver does, and checks the digest when it reads a payload back.
It talks to S3 through an `S3StorageDriverClient`: `kadence.contrib.aws.s3driver.aioboto3` wraps an
aioboto3 (or aiobotocore) client, which `pip install 'kadence[aioboto3]'` brings; another library
needs a subclass of its own. The bucket must exist: the driver creates none.
"""

from kadence.contrib.aws.s3driver._client import S3StorageDriverClient
from kadence.contrib.aws.s3driver._driver import S3StorageDriver

__all__ = ["S3StorageDriver", "S3StorageDriverClient"]
